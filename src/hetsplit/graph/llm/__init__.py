"""Real LLM checkpoints in: GGUF files of the Llama family (``gguf_file``) and Hugging Face folders
(``hf``: config.json, safetensors, tokenizer.json), read alike by ``load.read_model``; their tokenizer
(``tokenizer``), a torch reference decoder with a KV cache (``decoder``), the same stage as ONNX graphs for
onnxruntime (``onnx_blocks``) and the costing graph of one prefill or decode step (``step_graph``)."""

EXECUTORS = ("torch", "onnxruntime")   # what computes an LLM stage on a CPU (a GPU's stage: torch on CUDA, either way)

