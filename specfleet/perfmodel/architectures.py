"""Published ``config.json`` fields of models the shipped configs name, for the prior when the
checkpoint is not on this machine (a local or cached ``config.json`` always wins).

Each entry copies the fields ``prior.shape_from_hf_config`` reads from the model's
``config.json`` on Hugging Face (``https://huggingface.co/<id>/blob/main/config.json``).
"""

from types import MappingProxyType

_LLAMA3_VOCAB = 128256
KNOWN_CONFIGS = MappingProxyType({
    "meta-llama/Llama-3.3-70B-Instruct": {
        "hidden_size": 8192, "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
        "head_dim": 128, "intermediate_size": 28672, "vocab_size": _LLAMA3_VOCAB, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16"},
    "meta-llama/Llama-3.1-8B-Instruct": {
        "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 128, "intermediate_size": 14336, "vocab_size": _LLAMA3_VOCAB, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16"},
    "meta-llama/Llama-3.2-3B-Instruct": {
        "hidden_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 24, "num_key_value_heads": 8,
        "head_dim": 128, "intermediate_size": 8192, "vocab_size": _LLAMA3_VOCAB, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16"},
    "meta-llama/Llama-3.2-1B-Instruct": {
        "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 64, "intermediate_size": 8192, "vocab_size": _LLAMA3_VOCAB, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16"},
})
