"""Text encoders: BERT WordPiece, XLNet SentencePiece and tensor2tensor's SubwordTextEncoder.

All three implement one `Encoder` protocol (encode/decode/tokenize, token<->id conversion,
`vocab_size`, `special_ids`, `fingerprint()`), so problems can treat them alike and record the
vocabulary's sha256 in their manifests. One module per job:
- base.py: the `Encoder` protocol, `EncoderError`, the shared file helpers;
- reference.py: FullTokenizer's WordPiece in pure Python (the oracle), bert vocab files;
- wordpiece.py: the fast `WordpieceEncoder` (regex or HF backend) and its caches;
- wordpiece_vocab.py: learning a WordPiece vocabulary;
- sentencepiece.py: XLNet's `SentencePieceEncoder` and `train_sentencepiece`;
- subword.py: tensor2tensor's `SubwordTextEncoder` and its tokenizer.
This package exports the public names; import a submodule for anything else.
"""
from textrain.framework.encoders.base import Encoder, EncoderError, sha256_of_file
from textrain.framework.encoders.reference import (
    BERT_SPECIAL_TOKENS,
    MAX_INPUT_CHARS_PER_WORD,
    ReferenceWordpieceTokenizer,
    bert_basic_tokenize,
    bert_clean_text,
    is_cjk,
    load_wordpiece_vocab,
    wordpiece_split,
)
from textrain.framework.encoders.sentencepiece import (
    SPIECE_UNDERLINE,
    XLNET_CONTROL_SYMBOLS,
    XLNET_SPECIAL_IDS,
    XLNET_USER_DEFINED_SYMBOLS,
    SentencePieceEncoder,
    train_sentencepiece,
    xlnet_preprocess_text,
)
from textrain.framework.encoders.subword import (
    EOS,
    EOS_ID,
    PAD,
    PAD_ID,
    RESERVED_TOKENS,
    SubwordTextEncoder,
    count_tokens,
    t2t_detokenize,
    t2t_tokenize,
)
from textrain.framework.encoders.wordpiece import WordpieceEncoder, bert_words_fast
from textrain.framework.encoders.wordpiece_vocab import build_wordpiece_vocab, learn_wordpiece

__all__ = [
    "BERT_SPECIAL_TOKENS", "EOS", "EOS_ID", "Encoder", "EncoderError", "MAX_INPUT_CHARS_PER_WORD", "PAD", "PAD_ID",
    "RESERVED_TOKENS", "ReferenceWordpieceTokenizer", "SPIECE_UNDERLINE", "SentencePieceEncoder",
    "SubwordTextEncoder", "WordpieceEncoder", "XLNET_CONTROL_SYMBOLS", "XLNET_SPECIAL_IDS",
    "XLNET_USER_DEFINED_SYMBOLS", "bert_basic_tokenize", "bert_clean_text", "bert_words_fast",
    "build_wordpiece_vocab", "count_tokens", "is_cjk", "learn_wordpiece", "load_wordpiece_vocab",
    "sha256_of_file", "t2t_detokenize", "t2t_tokenize", "train_sentencepiece", "wordpiece_split",
    "xlnet_preprocess_text",
]
