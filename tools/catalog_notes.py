"""The hand-written part of nvscope's option catalog, which ``tools/regen_catalog.py`` joins with what it reads from
nvFuser's git history (names, lists, version ranges) to write ``nvscope/_core/_catalog_data.py``.

Edit this file, then regenerate; never edit ``nvscope/_core/_catalog_data.py`` by hand. The regenerator refuses to run
when nvFuser has a name this file lacks, or this file has a name nvFuser never had, and says which.

``GATES`` records, for an option, the fusions it can affect: only those holding one of some nvFuser IR nodes. An entry
belongs here only when reading nvFuser's source shows that the option is read on no path that a fusion without those
nodes can reach, at nvFuser's newest snapshot and at 0.2.35 (the version on the H200); when unsure, leave the option
out (it then affects every fusion). The regenerator checks, at the first and last commit of every version that has the
option and at the newest commit, that every nvFuser file reading the option is among the files cited here, so a new
read site elsewhere stops the regeneration until someone reads it. ``FRONTEND_OPS`` maps the names ``repr(fd)``
prints (``fd.ops.<name>(...)``) to the IR nodes each puts in a fusion; the regenerator checks each name against the
cited frontend files.

Why each gate holds (nvFuser files under csrc/, read at 81c4b22fd750 and at 0.2.35):

- matmul_expr_eval: ExprEvalScheduler::canScheduleCompileTime reads it only when the fusion's single expression is a
  MatmulOp or LinearOp (scheduler/expr_eval_sched.cpp).
- fuse_matmul: read only in getMatmulCompileTimeRejectReason, for a matmul pattern whose op is a MatmulOp or LinearOp
  (scheduler/matmul_utils.cpp).
- fuse_multiple_matmuls: read only by the matmul scheduler once findMatmulPatterns found a pattern: a MatmulOp,
  LinearOp, MmaOp, or a sum (ReductionOp) of a mul (scheduler/matmul_utils.cpp, scheduler/mma_utils.cpp); WelfordOp is
  in the gate because the segmenter may translate a Welford into sums (fusion_segmenter.cpp).
- cutlass_scheduler: CutlassScheduler accepts a fusion only with a ScaledMmaOp (or, in pattern matching, a
  CutlassNvfp4GroupedMmaOp) (scheduler/cutlass.cpp, cutlass/gemm.cpp).
- greedy_scheduler: GreedyScheduler::canScheduleCompileTime needs an ArgsortOp, ScanOp, ScatterOp or TopKOp (PadOp
  too, while it was an enable option) (scheduler/greedy.cpp).
- resize_scheduler: ResizeScheduler needs a SliceOp or PadOp; the other read runs MovePadPass, which only moves PadOps
  and rewrites CatOps (scheduler/resize.cpp, preseg_passes/pre_segmenter.cpp, preseg_passes/move_pad.cpp).
- memory_promotion: read only in rejectScheduleForMemoryPromotion, for an exact-size GatherOp or an expression whose
  output has a resized logical domain (slice, pad, cat; topk makes one too) (scheduler/registry_utils.cpp).
- tma_reduction, tma_inner_persistent, ws_normalization: read only in the reduction, inner-persistent and inner-outer
  persistent schedulers, which all refuse a fusion without a ReductionOp, GroupedReductionOp or WelfordOp
  (ir_utils::hasAnyReductionOps; scheduler/reduction.cpp, normalization_utils.cpp, normalization_inner.cpp,
  normalization_inner_outer.cpp).
- welford_vectorization, grouped_grid_welford_outer_opt: read only while lowering a WelfordOp or GroupedWelfordOp (made
  from WelfordOps) (device_lower/pass/vectorize_welford.cpp, device_lower/pass/index.cpp).

No pass before scheduling creates any of these nodes from other ones (preseg_passes/, fusion_segmenter.cpp: they
rebuild, move or remove existing ones). No enable/disable option is read on SDPA paths, and the multi-GPU options
(p2p_*, multicast_protocol, insert_resharding_after, multidevice) depend on sharding, not on op kinds: none is gated.
"""

from __future__ import annotations

# (kind, name): (effect, requires_args, description). effect: "codegen" (can change the compiled kernels or which
# executor runs), "runtime" (runtime behaviour only) or "debug" (output, profiling, validation). requires_args: the
# option does nothing (or cannot work) unless given arguments, e.g. NVFUSER_ENABLE=p2p_protocol(put).
OPTIONS: dict[tuple[str, str], tuple[str, bool, str]] = {
    ("disable", "compile_to_sass"): ("debug", False, "Compile to PTX instead of directly to SASS so the PTX can be "
                                                     "examined"),
    ("disable", "contig_indexing"): ("codegen", False, "Disable contiguous indexing"),
    ("disable", "expr_simplify"): ("codegen", False, "Disable the expression simplifier (optional args: names of "
                                                     "passes to skip)"),
    ("disable", "fallback"): ("debug", False, "Disable fallback; unvalidated parallelization then triggers a warning"),
    ("disable", "fma"): ("codegen", False, "Disable FMA instructions (nvrtc --fmad=false)"),
    ("disable", "greedy_scheduler"): ("codegen", False, "Disable the greedy scheduler"),
    ("disable", "grouped_grid_welford_outer_opt"): ("codegen", False, "Disable the outer-optimized grouped grid "
                                                                      "welford kernel"),
    ("disable", "id_model"): ("codegen", False, "Disable building the IdModel during lowering"),
    ("disable", "index_hoist"): ("codegen", False, "Disable index hoisting"),
    ("disable", "infer_contiguity"): ("codegen", False, "Disable contiguity inference for expression-evaluator "
                                                        "segments"),
    ("disable", "kernel_reuse"): ("codegen", False, "Do not reuse cached FusionKernelRuntimes across different input "
                                                    "shapes"),
    ("disable", "magic_zero"): ("codegen", False, "Disable the nvfuser_zero (magic zero) trick"),
    ("disable", "matmul_expr_eval"): ("codegen", False, "Disable ATen evaluation of whole fusions that contain a "
                                                        "matmul"),
    ("disable", "multidevice"): ("runtime", False, "Do not create the multidevice communicator (debugging aid)"),
    ("disable", "nvrtc_caching"): ("runtime", False, "Disable nvrtc compilation caching"),
    ("disable", "nvtx"): ("debug", False, "Disable NVTX instrumentation"),
    ("disable", "parallel_compile"): ("runtime", False, "Compile fusion segments serially instead of in parallel"),
    ("disable", "parallel_serde"): ("runtime", False, "Deserialize FusionExecutorCache serially instead of in "
                                                      "parallel"),
    ("disable", "predicate_elimination"): ("codegen", False, "Disable predicate elimination"),
    ("disable", "python_inline_definitions"): ("debug", False, "Do not print inline definitions in Python fusion "
                                                               "definitions"),
    ("disable", "resize_scheduler"): ("codegen", False, "Disable the resize scheduler"),
    ("disable", "reuse_mismatched_type_registers"): ("codegen", False, "Only reuse registers explicitly when the data "
                                                                       "types match"),
    ("disable", "var_name_remapping"): ("debug", False, "Disable variable name remapping in generated CUDA code"),
    ("disable", "welford_vectorization"): ("codegen", False, "Disable vectorization of Welford ops"),
    ("enable", "cutlass_scheduler"): ("codegen", False, "Enable the CUTLASS scheduler and CUTLASS executor"),
    ("enable", "fast_math"): ("codegen", False, "Compile kernels with nvrtc --use_fast_math"),
    ("enable", "fuse_matmul"): ("codegen", False, "Enable automatic fusion of matmul and linear ops"),
    ("enable", "fuse_multiple_matmuls"): ("codegen", False, "Allow more than one matmul to be fused into a single "
                                                            "kernel"),
    ("enable", "greedy_scheduler"): ("codegen", False, "Enable the greedy scheduler (later on by default; see disable "
                                                       "greedy_scheduler)"),
    ("enable", "host_ir_jit"): ("runtime", False, "Run the host IR program through the LLVM-based host IR JIT instead "
                                                  "of the evaluator"),
    ("enable", "host_ir_lowering"): ("codegen", False, "Lower FusionKernelRuntime to host IR"),
    ("enable", "id_model"): ("codegen", False, "Enable IdModel-based indexing/predication/loops (args select parts, "
                                               "e.g. index, all)"),
    ("enable", "id_model_extra_validation"): ("debug", False, "Run extra error checks while building the IdModel"),
    ("enable", "infer_contiguity"): ("codegen", False, "Enable contiguity inference for expression-evaluator "
                                                       "segments"),
    ("enable", "insert_resharding_after"): ("codegen", False, "Insert the resharding set after the expression instead "
                                                              "of before it"),
    ("enable", "io_to_lower_precision"): ("codegen", False, "Cast segment inputs/outputs to lower precision (off by "
                                                            "default, see #1889)"),
    ("enable", "kernel_db"): ("runtime", False, "Use the on-disk kernel database to store and reuse compiled kernels"),
    ("enable", "kernel_debug"): ("debug", False, "Compile kernels in nvrtc debug mode (-G)"),
    ("enable", "kernel_lineinfo"): ("debug", False, "Embed line info in compiled kernels and dump the full CUDA C++ "
                                                    "source"),
    ("enable", "kernel_profile"): ("debug", False, "Enable intra-kernel performance profiling instrumentation"),
    ("enable", "memory_promotion"): ("codegen", False, "Promote memory types for non-pointwise ops"),
    ("enable", "multicast_protocol"): ("runtime", True, "Choose the multicast protocol via args: memcpy, multimem or "
                                                        "batch_memcpy"),
    ("enable", "p2p_protocol"): ("runtime", True, "Choose the multi-GPU P2P protocol via args: put or get"),
    ("enable", "p2p_transport"): ("runtime", True, "Choose the P2P data transport via args: CopyEngine (default) or "
                                                   "Tma"),
    ("enable", "parallel_serde"): ("runtime", False, "Deserialize FusionExecutorCache in parallel"),
    ("enable", "resize_scheduler"): ("codegen", False, "Enable the resize scheduler (later on by default; see disable "
                                                       "resize_scheduler)"),
    ("enable", "reuse_zeroed_memory"): ("runtime", False, "Reuse zeroed memory buffers used for grid "
                                                          "synchronization"),
    ("enable", "static_fusion_count"): ("debug", False, "Use a single static fusion count in kernel names"),
    ("enable", "tma_inner_persistent"): ("codegen", False, "Enable the TMA inner-persistent kernel"),
    ("enable", "tma_pointwise"): ("codegen", False, "Enable the TMA pointwise kernel"),
    ("enable", "tma_reduction"): ("codegen", False, "Enable the TMA reduction kernel"),
    ("enable", "wait_debugger"): ("debug", True, "Multi-GPU debugging: ranks given as args wait for gdb attach at "
                                                 "startup"),
    ("enable", "warn_register_spill"): ("debug", False, "Warn when a kernel spills registers (optional arg: allowed "
                                                        "spill bytes)"),
    ("enable", "ws_normalization"): ("codegen", False, "Enable the warp-specialized persistent normalization kernel"),
}

# The frontend files that name the ops: nvfuser_direct prints repr(fd) from the fusion's IR (python_translate.cpp,
# with the reduction and scan names from translation_names.cpp); the legacy nvfuser frontend (0.2.35 and older)
# prints its recorded calls, named in python_bindings.cpp.
DIRECT = "python/python_direct/python_translate.cpp"
DIRECT_NAMES = "python/python_common/translation_names.cpp"
LEGACY = "python/python_frontend/python_bindings.cpp"

# name in repr(fd): (the nvFuser IR nodes the op puts in a fusion, the frontend files that name it)
FRONTEND_OPS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "argsort": (("ArgsortOp",), (DIRECT, LEGACY)),
    "batch_norm": (("WelfordOp",), (LEGACY,)),  # direct prints its parts (welford, ...)
    "cat": (("CatOp", "PadOp"), (DIRECT, LEGACY)),
    "cummax": (("ScanOp",), (DIRECT_NAMES,)),
    "cummin": (("ScanOp",), (DIRECT_NAMES,)),
    "cumprod": (("ScanOp",), (DIRECT_NAMES,)),
    "cumsum": (("ScanOp",), (DIRECT_NAMES, LEGACY)),
    "cutlass_nvfp4_grouped_mm": (("CutlassNvfp4GroupedMmaOp",), (DIRECT, LEGACY)),
    "fmax": (("ReductionOp",), (DIRECT_NAMES,)),
    "fmin": (("ReductionOp",), (DIRECT_NAMES,)),
    "gather": (("GatherOp",), (DIRECT, LEGACY)),
    "linear": (("LinearOp",), (DIRECT, LEGACY)),
    "matmul": (("MatmulOp",), (DIRECT, LEGACY)),
    "max": (("ReductionOp",), (DIRECT_NAMES, LEGACY)),
    "min": (("ReductionOp",), (DIRECT_NAMES, LEGACY)),
    "pad": (("PadOp",), (DIRECT, LEGACY)),
    "prod": (("ReductionOp",), (DIRECT_NAMES, LEGACY)),
    "scaled_mm": (("ScaledMmaOp",), (DIRECT, LEGACY)),
    "scatter": (("ScatterOp",), (DIRECT, LEGACY)),
    "slice": (("SliceOp",), (DIRECT, LEGACY)),
    "sum": (("ReductionOp",), (DIRECT_NAMES, LEGACY)),
    "take_along_axis": (("GatherOp",), (DIRECT, LEGACY)),
    "topk": (("TopKOp",), (DIRECT, LEGACY)),
    "var": (("ReductionOp",), (LEGACY,)),  # variance() sums; direct prints sum
    "var_mean": (("WelfordOp",), (LEGACY,)),  # direct prints welford
    "welford": (("WelfordOp",), (DIRECT, LEGACY)),
}

_MATMUL = ("LinearOp", "MatmulOp")
_REDUCTION = ("GroupedReductionOp", "ReductionOp", "WelfordOp")
_RESIZE = ("CatOp", "PadOp", "SliceOp")

# (kind, name): (the IR nodes a fusion must hold for the option to affect it, the nvFuser files that show it)
GATES: dict[tuple[str, str], tuple[tuple[str, ...], tuple[str, ...]]] = {
    ("disable", "greedy_scheduler"): (("ArgsortOp", "ScanOp", "ScatterOp", "TopKOp"), ("csrc/scheduler/greedy.cpp",)),
    ("disable", "grouped_grid_welford_outer_opt"): (("WelfordOp",), ("csrc/device_lower/pass/index.cpp",)),
    ("disable", "matmul_expr_eval"): (_MATMUL, ("csrc/scheduler/expr_eval_sched.cpp",)),
    ("disable", "resize_scheduler"): (_RESIZE, ("csrc/scheduler/resize.cpp", "csrc/preseg_passes/pre_segmenter.cpp",
                                                "csrc/preseg_passes/move_pad.cpp")),
    ("disable", "welford_vectorization"): (("WelfordOp",), ("csrc/device_lower/pass/vectorize_welford.cpp",)),
    ("enable", "cutlass_scheduler"): (("CutlassNvfp4GroupedMmaOp", "ScaledMmaOp"),
                                      ("csrc/scheduler/cutlass.cpp", "csrc/cutlass/gemm.cpp")),
    ("enable", "fuse_matmul"): (_MATMUL, ("csrc/scheduler/matmul_utils.cpp",)),
    ("enable", "fuse_multiple_matmuls"): ((*_MATMUL, "MmaOp", "ReductionOp", "WelfordOp"),
                                          ("csrc/scheduler/matmul_utils.cpp", "csrc/scheduler/mma_utils.cpp")),
    ("enable", "greedy_scheduler"): (("ArgsortOp", "PadOp", "ScanOp", "ScatterOp", "TopKOp"),
                                     ("csrc/scheduler/greedy.cpp",)),
    ("enable", "memory_promotion"): (("GatherOp", *_RESIZE, "TopKOp"), ("csrc/scheduler/registry_utils.cpp",)),
    ("enable", "resize_scheduler"): (_RESIZE, ("csrc/scheduler/resize.cpp", "csrc/preseg_passes/pre_segmenter.cpp",
                                               "csrc/preseg_passes/move_pad.cpp")),
    ("enable", "tma_inner_persistent"): (_REDUCTION, ("csrc/scheduler/normalization_inner.cpp",
                                                      "csrc/scheduler/normalization_utils.cpp")),
    ("enable", "tma_reduction"): (_REDUCTION, ("csrc/scheduler/reduction.cpp",)),
    ("enable", "ws_normalization"): (_REDUCTION, ("csrc/scheduler/normalization_inner_outer.cpp",
                                                  "csrc/scheduler/normalization_utils.cpp")),
}

# Where a version number is not enough. nvFuser's nightly builds are versioned <version.txt>.dev<YYYYMMDD> (e.g.
# 0.2.36.dev20260301), and a name added or removed between two version bumps is in some nightlies of that version and
# not in others, while the table's (first, last) versions say only that some commit of the version has it.
# (kind, name): (the day the commit adding the name landed on nvFuser's main branch, or None; the day the commit
# removing it landed, or None), as "YYYY-MM-DD" (git's committer date, %cs). A nightly dated before the first lacks the
# name; one dated on or after the second lacks it; one dated on the day itself may have been built either side of the
# commit and is taken to follow it. The regenerator checks each date against nvFuser's history where it has it.
NIGHTLY: dict[tuple[str, str], tuple[str | None, str | None]] = {
    # Came upstream on 2026-04-01, after 0.2.36's bump: `nvscope options --probe` on nvFuser 0.2.36.dev20260301
    # reported it "in the catalog for this version but not accepted by this build" (issue 27).
    ("enable", "p2p_transport"): ("2026-04-01", None),
}
