"""Real LLM checkpoints in: GGUF files of the Llama family (``gguf_file``) and Hugging Face folders
(``hf``: config.json, safetensors, tokenizer.json), read alike by ``load.read_model``; their tokenizer
(``tokenizer``), a torch reference decoder with a KV cache (``decoder``) and the costing graph of one
prefill or decode step (``step_graph``)."""
