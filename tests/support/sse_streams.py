"""Two streams in the exact format vLLM 0.32 emits, for the SSE loop's and the load client's tests.

The events were produced with vLLM's own protocol classes (``CompletionStreamResponse`` /
``ChatCompletionStreamResponse`` dumped as its serving code does, ``continuous_usage_stats`` on;
token counts chosen per test); the framing is its ``data: ...\\n\\n``. The chat finish chunk counts
a stop token that has no text.
"""

COMPLETION_STREAM = (
    b'data: {"id":"cmpl-a1","object":"text_completion","created":1700000000,"model":"tiny",'
    b'"choices":[{"index":0,"text":" The","logprobs":null,"finish_reason":null,"stop_reason":null,'
    b'"prompt_token_ids":null,"token_ids":null}],"usage":{"prompt_tokens":5,"total_tokens":6,'
    b'"completion_tokens":1}}\n\n'
    b'data: {"id":"cmpl-a1","object":"text_completion","created":1700000000,"model":"tiny",'
    b'"choices":[{"index":0,"text":" cat sat","logprobs":null,"finish_reason":null,"stop_reason":null,'
    b'"prompt_token_ids":null,"token_ids":null}],"usage":{"prompt_tokens":5,"total_tokens":9,'
    b'"completion_tokens":4}}\n\n'
    b'data: {"id":"cmpl-a1","object":"text_completion","created":1700000000,"model":"tiny",'
    b'"choices":[{"index":0,"text":" down","logprobs":null,"finish_reason":"length","stop_reason":null,'
    b'"prompt_token_ids":null,"token_ids":null}],"usage":{"prompt_tokens":5,"total_tokens":10,'
    b'"completion_tokens":5}}\n\n'
    b'data: {"id":"cmpl-a1","object":"text_completion","created":1700000000,"model":"tiny","choices":[],'
    b'"usage":{"prompt_tokens":5,"total_tokens":10,"completion_tokens":5},'
    b'"metrics":{"time_to_first_token_ms":12.5,"speculative_decoding":{"mean_acceptance_length":2.0,'
    b'"draft_acceptance_rate":0.5,"acceptance_histogram":[1,0,1,0],"num_spec_steps":2,'
    b'"num_accepted_draft_tokens":3,"num_draft_tokens":6,"num_spec_tokens":3}}}\n\n'
    b"data: [DONE]\n\n"
)

CHAT_STREAM = (
    b'data: {"id":"chatcmpl-b2","object":"chat.completion.chunk","created":1700000000,"model":"tiny",'
    b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,'
    b'"finish_reason":null}],"usage":{"prompt_tokens":9,"total_tokens":9,"completion_tokens":0}}\n\n'
    b'data: {"id":"chatcmpl-b2","object":"chat.completion.chunk","created":1700000000,"model":"tiny",'
    b'"choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":null}],'
    b'"usage":{"prompt_tokens":9,"total_tokens":10,"completion_tokens":1}}\n\n'
    b'data: {"id":"chatcmpl-b2","object":"chat.completion.chunk","created":1700000000,"model":"tiny",'
    b'"choices":[{"index":0,"delta":{"content":" there"},"logprobs":null,"finish_reason":null}],'
    b'"usage":{"prompt_tokens":9,"total_tokens":12,"completion_tokens":3}}\n\n'
    b'data: {"id":"chatcmpl-b2","object":"chat.completion.chunk","created":1700000000,"model":"tiny",'
    b'"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":9,"total_tokens":13,"completion_tokens":4}}\n\n'
    b'data: {"id":"chatcmpl-b2","object":"chat.completion.chunk","created":1700000000,"model":"tiny",'
    b'"choices":[],"usage":{"prompt_tokens":9,"total_tokens":13,"completion_tokens":4}}\n\n'
    b"data: [DONE]\n\n"
)
