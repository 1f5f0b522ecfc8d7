# BERT-base (Devlin et al., 2019): 12 layers, hidden 768, 12 heads, ffn 3072, 512 positions,
# post-LN, masked LM + next-sentence prediction. See libai/model/zoo/bert.py.
# second_head: "nsp" (paper), "sop" (ALBERT's sentence order), None (RoBERTa-style MLM only).
model = dict(
    type="BertForPreTraining",
    vocab_size=30522,
    hidden_size=768,
    num_layers=12,
    num_heads=12,
    ffn_hidden_size=3072,
    max_position_embeddings=512,
    type_vocab_size=2,
    hidden_dropout=0.1,
    attention_dropout=0.1,
    activation="gelu",
    pre_norm=False,
    second_head="nsp",
)
