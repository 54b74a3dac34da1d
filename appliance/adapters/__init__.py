"""LoRA adapters: converting a PEFT adapter for llama.cpp, and the fine-tune the tests evaluate."""
