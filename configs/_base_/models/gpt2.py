# GPT-2 small (Radford et al., 2019): 12 layers, hidden 768, 12 heads, 1024 positions, pre-LN,
# gelu (tanh), tied LM head, residual-scaled init; 124 M parameters at vocab 50257.
# See libai/model/zoo/gpt.py.
model = dict(
    type="GPTForCausalLM",
    vocab_size=50257,
    hidden_size=768,
    num_layers=12,
    num_heads=12,
    max_position_embeddings=1024,
    hidden_dropout=0.1,
    attention_dropout=0.1,
    activation="gelu_tanh",
)
