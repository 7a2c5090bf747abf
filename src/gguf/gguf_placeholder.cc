// gguf layer
