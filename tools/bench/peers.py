"""The peers every benchmark runs jepa beside, set up one way: ONNX export of a torch module, ONNX
Runtime's session options, OpenVINO's compile and config, what each says about its kernels, and
PyTorch's threads. Each peer is imported inside the function that needs it: bench.harness.parse has
set their switches (bench.cpu.apply_peer_env) by then."""

from __future__ import annotations

import collections
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

OPSET = 18
# torch.onnx.export's two exporters, tried in this order. The TorchScript exporter comes first: ONNX
# Runtime's graph optimizer fuses its attention / LayerNorm / GELU patterns (ViT-S ran ~1.3x faster in
# ORT from it than from the dynamo export here); dynamo is the fallback and the future default.
EXPORTERS = ("torchscript", "dynamo")
CPU_EP = ["CPUExecutionProvider"]


def _err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:2000]


def export_onnx(
    module: Any, args: tuple[Any, ...], path: Path, *, input_names: Sequence[str] = ("x",),
    output_names: Sequence[str] = ("tokens",), dynamic_axes: dict[str, dict[int, str]] | None = None,
    dynamic_shapes: Any = None, exporters: Sequence[str] = EXPORTERS, opset: int = OPSET,
    loaders: Mapping[str, Callable[[Path], Any]] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """torch.onnx.export of `module` on `args` to `path`, f32, each exporter in turn until one works
    (with `loaders`, name -> load the file: until a runtime also accepts its file). dynamic_axes is
    the TorchScript exporter's, dynamic_shapes dynamo's. Returns what happened, every failure
    verbatim (attempts: exporter -> "ok" or the error; with loaders, exporter -> {"export": ...,
    loader: ...}), and the loaded runtimes by name."""
    import torch

    attempts: dict[str, Any] = {}
    for exporter in exporters:
        t0 = time.perf_counter()
        kw: dict[str, Any] = {"dynamo": exporter == "dynamo"}
        if exporter == "dynamo" and dynamic_shapes is not None:
            kw["dynamic_shapes"] = dynamic_shapes
        elif exporter != "dynamo" and dynamic_axes is not None:
            kw["dynamic_axes"] = dynamic_axes
        try:
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(module, args, str(path), input_names=list(input_names),
                                  output_names=list(output_names), opset_version=opset, **kw)
        except Exception as exc:  # the exporter's own error is the result to record
            attempts[exporter] = _err(exc) if loaders is None else {"export": _err(exc)}
            print(f"  torch.onnx.export ({exporter}) failed: {_err(exc)[:300]}", file=sys.stderr)
            continue
        seconds = round(time.perf_counter() - t0, 1)
        if loaders is None:
            attempts[exporter] = "ok"
            return {"exporter": exporter, "opset": opset, "seconds": seconds, "attempts": attempts}, {}
        tried = attempts[exporter] = {"export": f"ok ({seconds:.0f} s)"}
        loaded: dict[str, Any] = {}
        for name, load in loaders.items():
            try:
                loaded[name] = load(path)
                tried[name] = "ok"
            except Exception as exc:  # the runtime's refusal of the exported file
                tried[name] = _err(exc)
                print(f"  {name} refused the {exporter} export: {tried[name][:300]}", file=sys.stderr)
        if loaded:
            return {"exporter": exporter, "opset": opset, "seconds": seconds, "attempts": attempts}, loaded
    return {"exporter": None, "opset": opset, "attempts": attempts}, {}


# ---- ONNX Runtime ----------------------------------------------------------------------------------------


def ort_options(threads: int) -> Any:
    """ONNX Runtime's session options for a run at `threads`: intra-op threads, one inter-op thread,
    every graph optimization, warnings off."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    return so


def ort_session(model: Path | bytes, threads: int) -> Any:
    """An InferenceSession on the CPU execution provider (a file, or a serialized model)."""
    import onnxruntime as ort

    return ort.InferenceSession(model if isinstance(model, bytes) else str(model), ort_options(threads),
                                providers=CPU_EP)


def ort_int8(onnx_path: Path, out: Path) -> Path:
    """ONNX Runtime's dynamic int8 of an exported model: MatMul / Gemm weights signed 8-bit per output
    channel, activations quantized at run time."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(onnx_path, out, weight_type=QuantType.QInt8, per_channel=True,
                     op_types_to_quantize=["MatMul", "Gemm"])
    return out


# ---- OpenVINO -------------------------------------------------------------------------------------------


def ov_config(precision: str, threads: int) -> dict[str, Any]:
    return {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": precision,
            "PERFORMANCE_HINT": "LATENCY"}


def ov_compile(core: Any, model: Any, shape: Sequence[int], precision: str, threads: int) -> Any:
    """The ONNX file at `model` (a path), or an OpenVINO model already read (the NNCF ones: left as
    they are), reshaped to the cell's static shape and compiled for the CPU."""
    m = core.read_model(str(model)) if isinstance(model, Path) else model.clone()
    m.reshape(list(shape))
    return core.compile_model(m, "CPU", ov_config(precision, threads))


def ov_kernels(compiled: Any) -> dict[str, Any]:
    """The primitives OpenVINO's CPU plugin picked for the heavy layers (from the runtime model)."""
    heavy = {"FullyConnected", "MatMul", "Convolution", "ScaledDotProductAttention", "Subgraph", "MVN"}
    count: collections.Counter[str] = collections.Counter()
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        layer = info["layerType"].astype(str) if "layerType" in info else ""
        if layer in heavy:
            prim = info["primitiveType"].astype(str) if "primitiveType" in info else "?"
            count[f"{layer}: {prim}"] += 1
    prec = compiled.get_property("INFERENCE_PRECISION_HINT")
    return {"inference_precision": prec.get_type_name() if hasattr(prec, "get_type_name") else str(prec),
            "threads": int(compiled.get_property("INFERENCE_NUM_THREADS")),
            "primitives": dict(sorted(count.items()))}


# ---- PyTorch, and what every peer says it runs ------------------------------------------------------------


def torch_info(torch: Any) -> dict[str, Any]:
    """What PyTorch says it runs: its ATen kernel class, threads, oneDNN and MKL."""
    return {"version": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "threads": torch.get_num_threads(), "mkldnn": bool(torch.backends.mkldnn.is_available()),
            "mkl": bool(torch.backends.mkl.is_available())}


def kernels_info() -> dict[str, Any]:
    """What each peer's kernels are, where it can be read (jepa's and OpenVINO's are per model)."""
    import onnxruntime as ort
    import openvino as ov
    import torch

    core = ov.Core()
    return {
        "onnxruntime": {"version": ort.__version__, "build": ort.get_build_info(),
                        "providers": ort.get_available_providers(),
                        "isa": "MLAS dispatches its kernels by CPUID at run time (not exposed; the GEMM "
                        "peak's mlas-f32 measures them)"},
        "openvino": {"version": ov.__version__, "cpu": str(core.get_property("CPU", "FULL_DEVICE_NAME")),
                     "optimization_capabilities": list(core.get_property("CPU",
                                                                         "OPTIMIZATION_CAPABILITIES"))},
        "torch": torch_info(torch),
    }
