"""BERT-style text encoders (family bert): a transformers directory (config.json + safetensors +
tokenizer.json) of a BertModel or XLMRobertaModel, or a sentence-transformers directory around one
(modules.json, 1_Pooling/config.json, 2_Normalize, sentence_bert_config.json).

The file carries the whole model: weights, the tokenizer.json (its own padding and truncation
dropped: the pipeline truncates to jepa.text.max_seq_len and counts it), the pooling and whether to
normalise. A checkpoint that does not say how it pools needs --pooling: the wrong pooling gives
plausible, useless vectors, so it is never guessed. Left out on purpose: the pooler (`pooler.dense`,
tanh(Linear) of the CLS token, not what sentence-transformers pools) and the `position_ids` /
`token_type_ids` buffers. Anything else unmapped (an MLM head, a classifier) is an error."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..gguf.schema import Encoder, Preprocess
from ..gguf.text_schema import TextEncoder
from ..gguf.writer import write_text_gguf
from .base import Config, Converter, read_json, register
from .source import TensorSource, load_json, safetensors_files

_ACTS = {"gelu": "gelu_erf", "gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh"}
# model_type -> (layout, the prefix task models put before the backbone)
_LAYOUTS = {
    "bert": ("BertModel", "bert."),
    "xlm-roberta": ("XLMRobertaModel", "roberta."),
    "roberta": ("XLMRobertaModel", "roberta."),
}
_BLOCK = {
    "attn_q": "encoder.layer.{i}.attention.self.query",
    "attn_k": "encoder.layer.{i}.attention.self.key",
    "attn_v": "encoder.layer.{i}.attention.self.value",
    "attn_out": "encoder.layer.{i}.attention.output.dense",
    "ln1": "encoder.layer.{i}.attention.output.LayerNorm",
    "ffn_up": "encoder.layer.{i}.intermediate.dense",
    "ffn_down": "encoder.layer.{i}.output.dense",
    "ln2": "encoder.layer.{i}.output.LayerNorm",
}
_SKIPPED = (
    "pooler.dense.weight",
    "pooler.dense.bias",
    "embeddings.position_ids",
    "embeddings.token_type_ids",
)
# sentence-transformers' Pooling config flags -> our pooling; the other modes are refused by name.
_POOL_FLAGS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_lasttoken": "last_token",
}
_UNSUPPORTED_FLAGS = (
    "pooling_mode_max_tokens",
    "pooling_mode_mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens",
)
_ST = "sentence_transformers.models."


def prepared_tokenizer(path: Path) -> str:
    """tokenizer.json without its own padding and truncation (the pipeline sets both), compact,
    checked to load with HF tokenizers."""
    if not path.is_file():
        raise ValueError(f"{path.parent}: no tokenizer.json (a text model's file carries its tokenizer)")
    doc = load_json(path)
    if not isinstance(doc, dict) or "model" not in doc:
        raise ValueError(f"{path}: not a tokenizer.json (no model)")
    doc["padding"] = None
    doc["truncation"] = None
    text = json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:  # pragma: no cover - the text extra
        raise ValueError("converting a text model needs HF tokenizers: pip install 'jepa[text]'") from exc
    try:
        Tokenizer.from_str(text)
    except Exception as exc:  # tokenizers raises its own Exception type
        raise ValueError(f"{path}: HF tokenizers cannot read it: {exc}") from None
    return text


class SentenceTransformersDir:
    """What a sentence-transformers directory says: where the transformer is, its pooling, normalise."""

    def __init__(self, src: Path) -> None:
        kinds = _modules(src / "modules.json")
        unknown = sorted(set(kinds) - {"Transformer", "Pooling", "Normalize"})
        if unknown:
            raise ValueError(f"{src}: unsupported sentence-transformers module(s): {', '.join(unknown)}")
        if "Transformer" not in kinds:
            raise ValueError(f"{src}: modules.json has no Transformer module")
        self.model_dir = src / kinds["Transformer"]
        self.normalize = "Normalize" in kinds
        self._pooling_config = src / kinds["Pooling"] / "config.json" if "Pooling" in kinds else None
        cfg = read_json(self.model_dir / "sentence_bert_config.json") or read_json(
            src / "sentence_bert_config.json"
        )
        self.max_seq_len: int | None = (cfg.integer("max_seq_length", 0) or None) if cfg else None

    def pooling(self) -> str | None:
        """The Pooling module's mode (None without one); the modes the engine does not run are refused."""
        path = self._pooling_config
        if path is None:
            return None
        cfg = read_json(path)
        if cfg is None:
            raise ValueError(f"{path}: missing (the Pooling module's config)")
        on = [f for f in (*_POOL_FLAGS, *_UNSUPPORTED_FLAGS) if cfg.flag(f, False)]
        if len(on) != 1 or on[0] not in _POOL_FLAGS:
            return _refuse(path, on)
        return _POOL_FLAGS[on[0]]


def _modules(path: Path) -> dict[str, str]:
    """modules.json: each module's type (without sentence_transformers.models.) -> its folder, a
    relative path inside the directory."""
    modules = load_json(path)
    if not isinstance(modules, list):
        raise ValueError(f"{path}: not a JSON list of modules")
    kinds: dict[str, str] = {}
    for i, m in enumerate(modules):
        if not isinstance(m, dict):
            raise ValueError(f"{path}: module [{i}] must be an object with a type, got {json.dumps(m)[:60]}")
        entry = Config(path, m, f"[{i}].")
        folder = entry.string("path", "")
        if Path(folder).is_absolute() or ".." in Path(folder).parts:
            raise entry.error("path", f"must be a folder inside the directory, got {folder!r}")
        kinds[entry.string("type").removeprefix(_ST)] = folder
    return kinds


def _refuse(path: Path, on: list[str]) -> str:
    raise ValueError(
        f"{path}: unsupported pooling {' + '.join(on) or '(none set)'}; "
        "the engine pools cls, mean or last_token"
    )


@register
class BertConverter(Converter):
    family = "bert"
    modality = "text"

    def __init__(self, src: Path, options: Any = None) -> None:
        self.st = SentenceTransformersDir(src) if (src / "modules.json").is_file() else None
        self.model_dir = self.st.model_dir if self.st else src
        config = read_json(self.model_dir / "config.json")
        if config is None:
            raise ValueError(f"{self.model_dir}: no config.json")
        self.config: Config = config
        model_type = config.string("model_type", "")
        if model_type not in _LAYOUTS:
            raise ValueError(f"{config.path}: unsupported model_type={model_type!r} (family bert takes bert, "
                             "xlm-roberta)")
        self.layout, self.prefix = _LAYOUTS[model_type]
        super().__init__(src, options)

    @classmethod
    def detect(cls, src: Path) -> bool:
        if not src.is_dir():
            return False
        if (src / "modules.json").is_file():
            return True
        cfg = read_json(src / "config.json")
        return cfg is not None and isinstance(cfg.get("model_type"), str) and cfg["model_type"] in _LAYOUTS

    def open_source(self) -> TensorSource:
        return TensorSource(safetensors_files(self.model_dir), (self.prefix,))

    def text_hparams(self) -> TextEncoder:
        c, o = self.config, self.options
        act = c.choice("hidden_act", _ACTS, "gelu")
        c.choice("position_embedding_type", ("absolute",), "absolute")
        if c.flag("is_decoder", False) or c.flag("add_cross_attention", False):
            raise ValueError("unsupported: a decoder / cross-attention BERT (family bert is an encoder)")
        pos_offset = c.integer("pad_token_id", 1) + 1 if self.layout == "XLMRobertaModel" else 0
        n_positions = int(self.source.shape("embeddings.position_embeddings.weight")[0])
        pooling = o.pooling or (self.st.pooling() if self.st else None)
        if pooling is None:
            raise ValueError(
                f"{self.src}: the checkpoint does not say how it pools "
                "(no sentence-transformers Pooling module): "
                "pass --pooling cls, mean or last_token (the wrong one gives plausible, useless vectors)"
            )
        normalize = o.normalize if o.normalize is not None else bool(self.st and self.st.normalize)
        # --max-seq-len as given (too long is refused); the checkpoint's, capped to the position table.
        max_len = o.max_seq_len
        if max_len is None:
            tcfg = read_json(self.model_dir / "tokenizer_config.json")
            model_max = tcfg.get("model_max_length") if tcfg else None
            found = self.st.max_seq_len if self.st else None
            if found is None and type(model_max) is int and 0 < model_max < 1 << 20:
                found = model_max
            max_len = min(found or n_positions, n_positions - pos_offset)
        return TextEncoder(
            embed_dim=c.integer("hidden_size", lo=1),
            n_layer=c.integer("num_hidden_layers", lo=1),
            n_head=c.integer("num_attention_heads", lo=1),
            ffn_dim=c.integer("intermediate_size", lo=1),
            vocab_size=int(self.source.shape("embeddings.word_embeddings.weight")[0]),
            n_positions=n_positions,
            n_token_types=int(self.source.shape("embeddings.token_type_embeddings.weight")[0]),
            pooling=pooling,
            normalize=normalize,
            max_seq_len=int(max_len),
            pos_offset=pos_offset,
            ln_eps=c.number("layer_norm_eps", 1e-12),
            act=_ACTS[act],
            layout=self.layout,
            tokenizer=prepared_tokenizer(self.model_dir / "tokenizer.json"),
        )

    def hparams(self) -> Encoder:
        raise ValueError("a text model has no vision encoder hparams (see text_hparams)")

    def preprocess(self) -> Preprocess:
        raise ValueError("a text model has no image preprocessing")

    def tensors(self) -> Iterator[tuple[str, np.ndarray]]:
        s = self.source
        yield "text.tok_embed", s.take("embeddings.word_embeddings.weight")
        yield "text.type_embed", s.take("embeddings.token_type_embeddings.weight")
        yield "text.pos_embed", s.take("embeddings.position_embeddings.weight")
        yield from s.linear("text.embed_norm", "embeddings.LayerNorm", bias=True)
        for i in range(self.config.integer("num_hidden_layers", lo=1)):
            for dst, module in _BLOCK.items():
                yield from s.linear(
                    f"text.blk.{i}.{dst}", module.format(i=i), bias=dst.startswith("ln") or None
                )
        for name in _SKIPPED:
            if s.has(name):
                s.skip(name)

    def convert(self, out: str | Path, ftype: str = "f32") -> str:
        return write_text_gguf(out, self.meta(), self.text_hparams(), self.checked_tensors(), ftype)
