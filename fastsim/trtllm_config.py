"""Checks of the TRT-LLM engine's settings (``engine_type: trtllm`` / ``engine.backend: trtllm``).

Dynamo 1.6.1 runs TRT-LLM on the vLLM scheduler core with its own admission rule
(``kernels/trtllm.py``, docs/decisions/0360). Its only own knob is the ``trtllm`` object's
``capacity_scheduler_policy``, which takes one value, ``guaranteed_no_evict`` (the default); its
default block size is 32 and, like vLLM, it needs blocks of at least two tokens. Dynamo 1.4.2 runs
the same engine (its reports equal fastsim's on the cases of tests/data/trtllm_142) but refuses
``max_model_len`` on it and TRT-LLM in disaggregated serving.
"""

from __future__ import annotations

from fastsim.errors import InputError

POLICIES = ("guaranteed_no_evict",)
_VALID = ("capacity_scheduler_policy",)


def check_trtllm_args(obj, source: str) -> None:
    """Validate ``obj.trtllm`` (an EngineArgs being built) and the block size TRT-LLM refuses."""
    sub = obj.trtllm if obj.trtllm is not None else {}
    if not isinstance(sub, dict):
        raise InputError(f"{source}: field 'trtllm' must be an object, got {type(sub).__name__}")
    for key, value in sub.items():
        if key not in _VALID:
            raise InputError(f"{source}: unknown field 'trtllm.{key}' (valid fields: {', '.join(_VALID)})")
        if value not in POLICIES:
            raise InputError(f"{source}: field 'trtllm.{key}' must be 'guaranteed_no_evict' (the only "
                             f"TRT-LLM capacity scheduler policy Dynamo models), got {value!r}")
    if obj.engine_type != "trtllm":
        return  # Dynamo accepts (and ignores) the trtllm object on the other engines
    if obj.block_size == 1:
        raise InputError(f"{source}: field 'block_size' must be at least 2 with engine_type=trtllm "
                         "(Dynamo: vLLM/TRT-LLM block_size must be at least two), got 1")


def output_limit(engine) -> int:
    """The sequence length a request stops at (0: none): ``max_model_len``, and for TRT-LLM also the
    pool's capacity in tokens, since its admission reserves the whole sequence and Dynamo cuts a
    request's output to the room its prompt leaves in the pool (and rejects a prompt that leaves
    none)."""
    limit = int(engine.max_model_len or 0)
    if engine.engine_type == "trtllm":
        capacity = int(engine.num_gpu_blocks) * int(engine.block_size)
        if limit == 0 or capacity < limit:
            limit = capacity
    return limit


def check_release(engine, version: str) -> None:
    """Dynamo 1.4.2 runs TRT-LLM by the same rules as 1.6.1 but refuses ``max_model_len`` on it and
    TRT-LLM in disaggregated serving."""
    if engine.engine_type != "trtllm" or version != "1.4.2":
        return
    if engine.max_model_len is not None:
        raise InputError("field 'max_model_len' is supported only for engine_type=vllm with "
                         "dynamo_version='1.4.2' (Dynamo 1.4.2 refuses it on trtllm; 1.6.1 takes it)")
    if engine.worker_type != "aggregated":
        raise InputError("disaggregated serving does not support engine_type=trtllm with "
                         "dynamo_version='1.4.2' (as Dynamo 1.4.2 refuses it; 1.6.1 runs it)")
