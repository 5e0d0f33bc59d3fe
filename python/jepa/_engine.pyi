"""
jepa engine (native). Use the jepa package, not this module.
"""
from __future__ import annotations
import numpy
import numpy.typing
import typing
__all__: list[str] = ['Context', 'ContextParams', 'HeadKind', 'MAX_BATCH_LIMIT', 'Model', 'ModelInfo', 'Pooling', 'PosType', 'PredictParams', 'PredictorKind', 'Preprocess', 'Resample', 'ResizeMode', 'WorldRolloutParams', 'context_default_params', 'cpu_kernels', 'default_threads', 'device_memory', 'ggml_version', 'has_cuda', 'predict_default_params', 'quantize', 'type_id', 'type_row_bytes', 'version', 'world_rollout_default_params']
class _PybindEnum:
    """What py::enum_ gives every enum below, written once (typing only: at run time their base is pybind11_object)."""
    @typing.overload
    def __eq__(self, other: typing.Self) -> bool:
        ...
    @typing.overload
    def __eq__(self, other: typing.SupportsInt | typing.SupportsIndex) -> bool:
        ...
    @typing.overload
    def __eq__(self, other: typing.Any) -> bool:
        ...
    def __getstate__(self) -> int:
        ...
    def __hash__(self) -> int:
        ...
    def __index__(self) -> int:
        ...
    def __init__(self, value: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __int__(self) -> int:
        ...
    @typing.overload
    def __ne__(self, other: typing.Self) -> bool:
        ...
    @typing.overload
    def __ne__(self, other: typing.SupportsInt | typing.SupportsIndex) -> bool:
        ...
    @typing.overload
    def __ne__(self, other: typing.Any) -> bool:
        ...
    def __repr__(self) -> str:
        ...
    def __setstate__(self, state: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def __str__(self) -> str:
        ...
    @property
    def name(self) -> str:
        ...
    @property
    def value(self) -> int:
        ...
class PredictorKind(_PybindEnum):
    """The predictor a file holds (jepa.pred.kind)."""
    AC: typing.ClassVar[PredictorKind]
    LEWM: typing.ClassVar[PredictorKind]
    MASKED: typing.ClassVar[PredictorKind]
    NONE: typing.ClassVar[PredictorKind]
    __members__: typing.ClassVar[dict[str, PredictorKind]]
class HeadKind(_PybindEnum):
    """The head a file holds (jepa.head.kind)."""
    ATTENTIVE_POOL: typing.ClassVar[HeadKind]
    NONE: typing.ClassVar[HeadKind]
    __members__: typing.ClassVar[dict[str, HeadKind]]
class PosType(_PybindEnum):
    """The encoder's positions (jepa.enc.pos_type)."""
    LEARNED: typing.ClassVar[PosType]
    NONE: typing.ClassVar[PosType]
    ROPE3D: typing.ClassVar[PosType]
    SINCOS2D: typing.ClassVar[PosType]
    SINCOS3D: typing.ClassVar[PosType]
    __members__: typing.ClassVar[dict[str, PosType]]
class Pooling(_PybindEnum):
    """How an item's tokens become one vector (jepa_pooling_type)."""
    CLS: typing.ClassVar[Pooling]
    LAST: typing.ClassVar[Pooling]
    LEWM: typing.ClassVar[Pooling]
    MEAN: typing.ClassVar[Pooling]
    NONE: typing.ClassVar[Pooling]
    __members__: typing.ClassVar[dict[str, Pooling]]
class ResizeMode(_PybindEnum):
    """How a frame is resized (jepa.pre.resize_mode)."""
    SHORTEST_EDGE: typing.ClassVar[ResizeMode]
    SQUASH: typing.ClassVar[ResizeMode]
    __members__: typing.ClassVar[dict[str, ResizeMode]]
class Resample(_PybindEnum):
    """The resize filter (jepa.pre.resample)."""
    BICUBIC: typing.ClassVar[Resample]
    BILINEAR: typing.ClassVar[Resample]
    __members__: typing.ClassVar[dict[str, Resample]]
class Preprocess:
    """
    The file's preprocessing recipe (jepa.pre.*); read-only.
    """
    @property
    def crop(self) -> int:
        ...
    @property
    def mean(self) -> tuple:
        ...
    @property
    def resample(self) -> Resample:
        ...
    @property
    def rescale(self) -> float:
        ...
    @property
    def resize_mode(self) -> ResizeMode:
        ...
    @property
    def resize_short(self) -> int:
        ...
    @property
    def std(self) -> tuple:
        ...
class ModelInfo:
    """
    What a model is: jepa_model_info, field by field; read-only.
    """
    def __repr__(self) -> str:
        ...
    @property
    def backend(self) -> str:
        ...
    @property
    def embed_dim(self) -> int:
        ...
    @property
    def family(self) -> str:
        ...
    @property
    def ffn_dim(self) -> int:
        ...
    @property
    def file_type(self) -> int:
        ...
    @property
    def has_cls(self) -> bool:
        ...
    @property
    def head_kind(self) -> HeadKind:
        ...
    @property
    def img_size(self) -> int:
        ...
    @property
    def in_chans(self) -> int:
        ...
    @property
    def ln_eps(self) -> float:
        ...
    @property
    def matmul(self) -> str:
        ...
    @property
    def max_seq_len(self) -> int:
        ...
    @property
    def max_tokens(self) -> int:
        ...
    @property
    def modality(self) -> str:
        ...
    @property
    def n_bytes(self) -> int:
        ...
    @property
    def n_bytes_mapped(self) -> int:
        ...
    @property
    def n_classes(self) -> int:
        ...
    @property
    def n_frames(self) -> int:
        ...
    @property
    def n_head(self) -> int:
        ...
    @property
    def n_labels(self) -> int:
        ...
    @property
    def n_layer(self) -> int:
        ...
    @property
    def n_matmul_packed(self) -> int:
        ...
    @property
    def n_params(self) -> int:
        ...
    @property
    def n_positions(self) -> int:
        ...
    @property
    def n_registers(self) -> int:
        ...
    @property
    def n_token_types(self) -> int:
        ...
    @property
    def name(self) -> str:
        ...
    @property
    def patch_size(self) -> int:
        ...
    @property
    def pooling(self) -> Pooling:
        ...
    @property
    def pos_offset(self) -> int:
        ...
    @property
    def pos_type(self) -> PosType:
        ...
    @property
    def pred_action_dim(self) -> int:
        ...
    @property
    def pred_embed_dim(self) -> int:
        ...
    @property
    def pred_grid_size(self) -> int:
        ...
    @property
    def pred_kind(self) -> PredictorKind:
        ...
    @property
    def pred_n_frames(self) -> int:
        ...
    @property
    def pred_n_head(self) -> int:
        ...
    @property
    def pred_n_layer(self) -> int:
        ...
    @property
    def pred_n_mask_tokens(self) -> int:
        ...
    @property
    def pred_norm_reps_eps(self) -> float:
        ...
    @property
    def pred_state_dim(self) -> int:
        ...
    @property
    def preprocess(self) -> Preprocess:
        ...
    @property
    def text_normalize(self) -> bool:
        ...
    @property
    def tubelet_size(self) -> int:
        ...
    @property
    def vocab_size(self) -> int:
        ...
    @property
    def wm_embed_dim(self) -> int:
        ...
class Model:
    def __init__(self, path: str, device: typing.SupportsInt | typing.SupportsIndex = 0, device_index: typing.SupportsInt | typing.SupportsIndex = 0, use_mmap: bool = True) -> None:
        ...
    def file_changed(self) -> typing.Any:
        ...
    def info(self) -> ModelInfo:
        ...
    def labels(self) -> list:
        ...
    def n_tokens(self, C: typing.SupportsInt | typing.SupportsIndex, T: typing.SupportsInt | typing.SupportsIndex, H: typing.SupportsInt | typing.SupportsIndex, W: typing.SupportsInt | typing.SupportsIndex) -> int:
        ...
    def tokenizer(self) -> str:
        ...
class ContextParams:
    """
    jepa_context_params; read-only.
    """
    @property
    def flash_attn(self) -> int:
        ...
    @property
    def max_batch(self) -> int:
        ...
    @property
    def max_graph_bytes(self) -> int:
        ...
    @property
    def max_output_bytes(self) -> int:
        ...
    @property
    def n_threads(self) -> int:
        ...
class PredictParams:
    """
    jepa_predict_params; read-only.
    """
    @property
    def grid_h(self) -> int:
        ...
    @property
    def grid_w(self) -> int:
        ...
    @property
    def mask_index(self) -> int:
        ...
class WorldRolloutParams:
    """
    jepa_world_rollout_params; read-only.
    """
    @property
    def cache(self) -> int:
        ...
class Context:
    def __init__(self, model: typing.Any, n_threads: typing.SupportsInt | typing.SupportsIndex = 0, max_batch: typing.SupportsInt | typing.SupportsIndex = 32, flash_attn: typing.SupportsInt | typing.SupportsIndex = -1, max_graph_bytes: typing.SupportsInt | typing.SupportsIndex = 0, max_output_bytes: typing.SupportsInt | typing.SupportsIndex | None = None) -> None:
        ...
    def classify(self, tokens: typing.Annotated[numpy.typing.ArrayLike, numpy.float32]) -> tuple:
        ...
    def encode(self, pixels: typing.Annotated[numpy.typing.ArrayLike, numpy.float32]) -> numpy.typing.NDArray[numpy.float32]:
        ...
    def encode_text(self, ids: typing.Annotated[numpy.typing.ArrayLike, numpy.int32], seq_len: typing.Annotated[numpy.typing.ArrayLike, numpy.int32], type_ids: typing.Any = None, pool: typing.SupportsInt | typing.SupportsIndex = 0, normalize: bool = False) -> numpy.typing.NDArray[numpy.float32]:
        ...
    def predict(self, tokens: typing.Annotated[numpy.typing.ArrayLike, numpy.float32], context_ids: typing.Annotated[numpy.typing.ArrayLike, numpy.int32], target_ids: typing.Annotated[numpy.typing.ArrayLike, numpy.int32], mask_index: typing.SupportsInt | typing.SupportsIndex = 1, grid_h: typing.SupportsInt | typing.SupportsIndex = 0, grid_w: typing.SupportsInt | typing.SupportsIndex = 0) -> numpy.typing.NDArray[numpy.float32]:
        ...
    def set_max_batch(self, arg0: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def set_threads(self, arg0: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def world_latents(self, tokens: typing.Annotated[numpy.typing.ArrayLike, numpy.float32]) -> numpy.typing.NDArray[numpy.float32]:
        ...
    def world_predict(self, latents: typing.Annotated[numpy.typing.ArrayLike, numpy.float32], actions: typing.Annotated[numpy.typing.ArrayLike, numpy.float32], states: typing.Any = None, taps: bool = False) -> typing.Any:
        ...
    def world_rollout(self, context: typing.Annotated[numpy.typing.ArrayLike, numpy.float32], actions: typing.Annotated[numpy.typing.ArrayLike, numpy.float32], states: typing.Annotated[numpy.typing.ArrayLike, numpy.float32], cache: bool = True) -> numpy.typing.NDArray[numpy.float32]:
        ...
    @property
    def max_batch(self) -> int:
        ...
    @property
    def max_graph_bytes(self) -> int:
        ...
    @property
    def max_output_bytes(self) -> int:
        ...
    @property
    def n_threads(self) -> int:
        ...
def context_default_params() -> ContextParams:
    ...
def cpu_kernels() -> str:
    ...
def default_threads() -> int:
    """
    The CPU threads this process may use (affinity, capped by the cgroup's CPU quota): what 0 threads means.
    """
def device_memory(kind: typing.SupportsInt | typing.SupportsIndex, index: typing.SupportsInt | typing.SupportsIndex = 0) -> tuple[int, int]:
    """
    (free, total) bytes of a device (kind 0 CPU, 1 CUDA) as its backend reports them now.
    """
def ggml_version() -> str:
    ...
def has_cuda() -> bool:
    ...
def predict_default_params() -> PredictParams:
    ...
def quantize(type: str, rows: typing.Annotated[numpy.typing.ArrayLike, numpy.float32]) -> numpy.typing.NDArray[numpy.uint8]:
    """
    float32 rows [R, N] -> their bytes in `type` [R, row_bytes] (uint8).
    """
def type_id(type: str) -> int:
    """
    The ggml type id of a jepa-quantize type name.
    """
def type_row_bytes(type: str, n_per_row: typing.SupportsInt | typing.SupportsIndex) -> int:
    """
    Bytes of one row in `type` (UnsupportedError when its blocks do not divide it).
    """
def version() -> str:
    ...
def world_rollout_default_params() -> WorldRolloutParams:
    ...
MAX_BATCH_LIMIT: int = 4096
