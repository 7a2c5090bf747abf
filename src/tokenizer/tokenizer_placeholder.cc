// tokenizer layer
