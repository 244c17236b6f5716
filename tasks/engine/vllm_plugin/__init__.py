"""specfleet's vLLM plugin, loaded only by the servers specfleet starts for synthetic arms.

This folder is not on any path of the environment: vLLM finds no plugin of specfleet's unless a
server's ``PYTHONPATH`` names the folder (``specfleet_tasks.engine.synthetic_plugin``). It then holds the
plugin's distribution metadata (``specfleet_vllm_plugin-*.dist-info``: the ``vllm.general_plugins``
entry point) and its module under a top-level name of its own, ``specfleet_cpu_synthetic``, which
imports nothing from specfleet, so no other module of that name (a ``tasks.py`` in the server's
working directory, first on its ``sys.path``) is ever imported by the plugin."""
