# RoBERTa-base (Liu et al., 2019): BERT-base's post-LN encoder (12 layers, hidden 768, 12 heads,
# ffn 3072) with masked LM only: no next-sentence head, no pooler. Its positions count from the
# padding index (<pad> = 1), so 514 position rows hold sequences of 512 tokens; one token type;
# LayerNorm epsilon 1e-5; a 50,265-token byte-level BPE. See libai/model/zoo/roberta.py.
model = dict(
    type="RobertaForMaskedLM",
    vocab_size=50265,
    hidden_size=768,
    num_layers=12,
    num_heads=12,
    ffn_hidden_size=3072,
    max_position_embeddings=514,  # sequences of up to 514 - pad_token_id - 1 = 512 tokens
    type_vocab_size=1,
    hidden_dropout=0.1,
    attention_dropout=0.1,
    activation="gelu",
    layer_norm_eps=1e-5,
    pad_token_id=1,  # the tokenizer's <pad>: the data pads with it, the positions count from it
)
