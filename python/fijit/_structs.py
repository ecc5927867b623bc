"""ctypes mirror of the structs and enums of include/fijit.h, fijit_batch_decode.h,
fijit_prefill.h and fijit_mla.h, field for field and in order.

This is the ONE place the C layouts are written down in Python; tests/python checks
every field's offset and size, every struct's size, and each VERSION (the version of
the layout mirrored, FI_<STRUCT>_VERSION) against the C header with a small generated
C program, so a drift fails `make test`. Fields are only appended in C: a new field is
one new line at the end of its struct here and a VERSION bump. Defaults are not
written here: _lib.new_struct asks the library (fi_<struct>_init) for them.
"""
import ctypes

c_int, c_uint, c_float, c_void_p, c_size_t = (ctypes.c_int, ctypes.c_uint, ctypes.c_float,
                                             ctypes.c_void_p, ctypes.c_size_t)
i64 = ctypes.c_int64
i32_p = ctypes.POINTER(ctypes.c_int32)

# ---- enums (values pinned by the header) ----------------------------------------------
KIND = {"decode": 1, "batch_decode": 2, "prefill": 3, "batch_prefill_ragged": 4,
        "batch_prefill_paged": 5, "mla_decode": 6}
DTYPE = {"fp16": 1, "bf16": 2, "fp8_e4m3": 3, "fp8_e5m2": 4}
MASK = {"none": 0, "causal": 1, "window": 2, "custom": 3}
POS = {"none": 0, "rope": 1, "alibi": 2}
VARG_FLOAT, VARG_INT, VARG_PTR = 1, 2, 3
VARIANT_REPLACE = 1
BUILD_OUTCOME = {0: "compiled", 1: "cached"}

# The counters of FI_JIT_STATS_COUNTERS, in storage order.
STATS_COUNTERS = ("memory_hits", "disk_hits", "misses", "compiles", "compile_failures",
                  "compile_ns", "bytes_written", "corrupt", "entries", "bytes",
                  # version 2: the remote tier
                  "remote_hits", "remote_misses", "remote_errors", "remote_corrupt",
                  "remote_bytes_in", "remote_bytes_out")

class _StrictType(type(ctypes.Structure)):
    """Gives every struct class `__slots__ = ()`: an instance then has no __dict__, so
    setting a name that is not a field (a name of an older layout, say soft_cap on an
    args struct) raises AttributeError naming it, instead of being stored as a Python
    attribute that C never sees. Enforced by the interpreter, so setting a real field
    costs no Python-level check (a struct is built on every kernel call)."""

    def __new__(mcls, name, bases, ns, **kw):
        ns.setdefault("__slots__", ())
        return super().__new__(mcls, name, bases, ns, **kw)


class Struct(ctypes.Structure, metaclass=_StrictType):
    """A struct that refuses fields it does not have. `_keepalive` is the one
    Python-side attribute: objects the struct points at (a variant-argument array, the
    tensors behind its pointers) that must live as long as the struct is used."""
    __slots__ = ("_keepalive",)


class JitSpec(Struct):
    c_name = "fi_jit_spec"
    VERSION = 2
    _fields_ = [("version", c_uint), ("kind", c_int), ("q_dtype", c_int), ("kv_dtype", c_int),
                ("o_dtype", c_int), ("head_dim", c_int), ("mask", c_int), ("pos", c_int),
                ("soft_cap", c_int), ("variant", ctypes.c_char_p),
                # version 2
                ("head_dim_vo", c_int)]


class JitOptions(Struct):
    c_name = "fi_jit_options"
    VERSION = 3
    _fields_ = [("version", c_uint), ("cache_dir", ctypes.c_char_p), ("arch", ctypes.c_char_p),
                ("jit", c_int), ("use_disk_cache", c_int), ("log_level", c_int),
                ("max_cache_bytes", i64), ("allow_unsafe_dir", c_int),
                # version 2
                ("remote", ctypes.c_char_p), ("remote_secret", ctypes.c_char_p),
                # version 3: the log callback (NULL here: messages go to stderr)
                ("log_fn", ctypes.c_void_p), ("log_user", ctypes.c_void_p)]


class JitStats(Struct):
    c_name = "fi_jit_stats"
    VERSION = 2
    _fields_ = [("version", c_uint)] + [(n, i64) for n in STATS_COUNTERS]


class JitKernel(Struct):
    c_name = "fi_jit_kernel"
    _fields_ = [("function", c_void_p), ("functions", c_void_p * 6),  # FI_JIT_MAX_FUNCTIONS
                ("block_dim", c_uint * 3), ("merge_block_dim", c_uint * 3),
                ("smem_bytes", c_uint), ("param_bytes", c_uint), ("registers", c_int),
                ("spill_bytes", c_int), ("key", ctypes.c_uint8 * 16), ("arch", ctypes.c_char * 16)]


class _VariantValue(ctypes.Union):
    _fields_ = [("f", c_float), ("i", c_int), ("ptr", c_void_p)]


class VariantArg(Struct):
    c_name = "fi_variant_arg"
    _fields_ = [("name", ctypes.c_char_p), ("type", c_int), ("value", _VariantValue)]


class DecodeArgs(Struct):
    c_name = "fi_decode_args"
    VERSION = 4
    _fields_ = [("version", c_uint), ("q", c_void_p), ("k", c_void_p), ("v", c_void_p),
                ("o", c_void_p), ("lse", c_void_p),
                ("num_qo_heads", c_int), ("num_kv_heads", c_int), ("kv_len", c_int),
                ("q_stride_h", i64), ("o_stride_h", i64), ("k_stride_n", i64),
                ("k_stride_h", i64), ("v_stride_n", i64), ("v_stride_h", i64),
                ("sm_scale", c_float), ("logits_soft_cap", c_float), ("rope_scale", c_float),
                ("rope_theta", c_float), ("rope_offset", c_int), ("window_left", c_int),
                ("alibi_slopes", c_void_p), ("workspace", c_void_p),
                ("workspace_bytes", c_size_t), ("max_splits", c_int),
                ("k_scale", c_float), ("v_scale", c_float),                   # version 2
                ("variant_args", c_void_p), ("num_variant_args", c_int),      # version 3
                ("sm_count", c_int)]                                          # version 4


class BatchDecodePlanArgs(Struct):
    c_name = "fi_batch_decode_plan_args"
    VERSION = 1
    _fields_ = [("version", c_uint), ("batch_size", c_int), ("kv_indptr", i32_p),
                ("kv_last_page_len", i32_p), ("num_qo_heads", c_int), ("num_kv_heads", c_int),
                ("page_size", c_int), ("window_left", c_int), ("max_splits", c_int),
                ("sm_count", c_int)]


class BatchDecodeArgs(Struct):
    c_name = "fi_batch_decode_args"
    VERSION = 3
    _fields_ = [("version", c_uint), ("q", c_void_p), ("k", c_void_p), ("v", c_void_p),
                ("o", c_void_p), ("lse", c_void_p), ("kv_indices", c_void_p),
                ("q_stride_b", i64), ("q_stride_h", i64), ("o_stride_b", i64),
                ("o_stride_h", i64), ("k_stride_page", i64), ("k_stride_n", i64),
                ("k_stride_h", i64), ("v_stride_page", i64), ("v_stride_n", i64),
                ("v_stride_h", i64), ("sm_scale", c_float), ("logits_soft_cap", c_float),
                ("rope_scale", c_float), ("rope_theta", c_float), ("rope_offsets", c_void_p),
                ("alibi_slopes", c_void_p), ("k_scale", c_float), ("v_scale", c_float),
                ("workspace", c_void_p), ("workspace_bytes", c_size_t),
                ("variant_args", c_void_p), ("num_variant_args", c_int)]


class MergeStatesArgs(Struct):
    c_name = "fi_merge_states_args"
    VERSION = 2
    _fields_ = [("version", c_uint), ("v", c_void_p), ("lse", c_void_p), ("v_out", c_void_p),
                ("lse_out", c_void_p), ("seq_len", c_int), ("num_states", c_int),
                ("num_heads", c_int), ("v_stride_n", i64), ("v_stride_state", i64),
                ("v_stride_h", i64), ("lse_stride_n", i64), ("lse_stride_state", i64),
                ("v_out_stride_n", i64), ("v_out_stride_h", i64),
                # version 2
                ("dtype", c_int), ("head_dim", c_int)]


class PrefillArgs(Struct):
    c_name = "fi_prefill_args"
    VERSION = 4
    _fields_ = [("version", c_uint), ("q", c_void_p), ("k", c_void_p), ("v", c_void_p),
                ("o", c_void_p), ("lse", c_void_p), ("num_qo_heads", c_int),
                ("num_kv_heads", c_int), ("qo_len", c_int), ("kv_len", c_int),
                ("q_stride_n", i64), ("q_stride_h", i64), ("o_stride_n", i64),
                ("o_stride_h", i64), ("k_stride_n", i64), ("k_stride_h", i64),
                ("v_stride_n", i64), ("v_stride_h", i64), ("sm_scale", c_float),
                ("logits_soft_cap", c_float), ("rope_scale", c_float), ("rope_theta", c_float),
                ("rope_offset", c_int), ("window_left", c_int), ("alibi_slopes", c_void_p),
                ("custom_mask", c_void_p), ("cta_tile_q", c_int),
                ("variant_args", c_void_p), ("num_variant_args", c_int),      # version 2
                ("workspace", c_void_p), ("workspace_bytes", c_size_t),       # version 3
                ("q_scale", c_float), ("k_scale", c_float), ("v_scale", c_float)]  # version 4


class BatchPrefillPlanArgs(Struct):
    c_name = "fi_batch_prefill_plan_args"
    VERSION = 2
    _fields_ = [("version", c_uint), ("batch_size", c_int), ("qo_indptr", i32_p),
                ("kv_indptr", i32_p), ("kv_last_page_len", i32_p), ("num_qo_heads", c_int),
                ("num_kv_heads", c_int), ("page_size", c_int), ("window_left", c_int),
                ("sm_count", c_int), ("cta_tile_q", c_int)]


class BatchPrefillArgs(Struct):
    c_name = "fi_batch_prefill_args"
    VERSION = 4
    _fields_ = [("version", c_uint), ("q", c_void_p), ("k", c_void_p), ("v", c_void_p),
                ("o", c_void_p), ("lse", c_void_p), ("qo_indptr", c_void_p),
                ("kv_indptr", c_void_p), ("kv_indices", c_void_p),
                ("kv_last_page_len", c_void_p), ("q_stride_n", i64), ("q_stride_h", i64),
                ("o_stride_n", i64), ("o_stride_h", i64), ("k_stride_page", i64),
                ("k_stride_n", i64), ("k_stride_h", i64), ("v_stride_page", i64),
                ("v_stride_n", i64), ("v_stride_h", i64), ("sm_scale", c_float),
                ("logits_soft_cap", c_float), ("rope_scale", c_float), ("rope_theta", c_float),
                ("rope_offset", c_int), ("alibi_slopes", c_void_p), ("custom_mask", c_void_p),
                ("custom_mask_offsets", c_void_p), ("variant_args", c_void_p),
                ("num_variant_args", c_int),
                # version 4
                ("rope_offsets", c_void_p)]


class BatchMLADecodePlanArgs(Struct):
    c_name = "fi_batch_mla_decode_plan_args"
    VERSION = 1
    _fields_ = [("version", c_uint), ("batch_size", c_int), ("qo_indptr", i32_p),
                ("kv_indptr", i32_p), ("kv_last_page_len", i32_p), ("num_heads", c_int),
                ("page_size", c_int), ("max_splits", c_int), ("sm_count", c_int)]


class BatchMLADecodeArgs(Struct):
    c_name = "fi_batch_mla_decode_args"
    VERSION = 1
    _fields_ = [("version", c_uint), ("q_nope", c_void_p), ("q_pe", c_void_p),
                ("ckv", c_void_p), ("kpe", c_void_p), ("o", c_void_p), ("lse", c_void_p),
                ("kv_indices", c_void_p), ("q_nope_stride_n", i64), ("q_nope_stride_h", i64),
                ("q_pe_stride_n", i64), ("q_pe_stride_h", i64), ("ckv_stride_page", i64),
                ("ckv_stride_n", i64), ("kpe_stride_page", i64), ("kpe_stride_n", i64),
                ("o_stride_n", i64), ("o_stride_h", i64), ("sm_scale", c_float),
                ("logits_soft_cap", c_float), ("kv_scale", c_float), ("workspace", c_void_p),
                ("workspace_bytes", c_size_t), ("variant_args", c_void_p),
                ("num_variant_args", c_int)]


# Every mirrored struct, for the layout test.
ALL = (JitSpec, JitOptions, JitStats, JitKernel, VariantArg, DecodeArgs, BatchDecodePlanArgs,
       BatchDecodeArgs, MergeStatesArgs, PrefillArgs, BatchPrefillPlanArgs, BatchPrefillArgs,
       BatchMLADecodePlanArgs, BatchMLADecodeArgs)

