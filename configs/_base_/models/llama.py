# Llama 3.2 1B (Meta, 2024): 16 layers, hidden 2048, 32 query heads sharing 8 key/value heads
# (grouped-query attention, head width 64), SwiGLU width 8192, RMSNorm, rotary positions with
# base 500,000 and Llama 3's frequency scaling (factor 32 over an original 8,192 context), a
# 131,072-token context, the LM head tied to the embeddings, no biases; 1,235,814,400 parameters
# at the 128,256-token vocabulary. See libai/model/zoo/llama.py.
model = dict(
    type="LlamaForCausalLM",
    vocab_size=128256,
    hidden_size=2048,
    num_layers=16,
    num_heads=32,
    num_kv_heads=8,
    ffn_hidden_size=8192,
    max_position_embeddings=131072,
    rms_norm_eps=1e-5,
    rope_theta=500000.0,
    rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                      original_max_position_embeddings=8192),
    tie_word_embeddings=True,
    attention_dropout=0.0,
)
