"""Which GPU a rank uses: one GPU per rank, on any launcher (the cupy backend and the client tuner both ask)."""

from __future__ import annotations

from collections.abc import Mapping

from p2synth.runtime.backend_kind import BackendUnavailable

# (local rank, local size) as each launcher names them: torchrun, then Open MPI's mpiexec
LOCAL_VARIABLES = (("LOCAL_RANK", "LOCAL_WORLD_SIZE"), ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"))


def device_index(local_rank: int, local_size: int, devices: int, visible: str | None) -> int:
    """The CUDA device of the rank at `local_rank` of the `local_size` ranks of its node, which sees `devices` GPUs.

    One GPU per rank: device `local_rank` when the node's ranks see a GPU
    each; where the launcher gave each rank its own GPU (`visible`, the
    rank's ``CUDA_VISIBLE_DEVICES``, set to one device: SLURM's
    ``--gpus-per-task=1``, and many launchers), the one it sees, device 0
    (were two ranks given the same GPU, NCCL refuses: "Duplicate GPU
    detected"). BackendUnavailable otherwise.
    """
    if 0 <= local_rank < local_size <= devices:
        return local_rank
    if devices == 1 and visible:
        return 0
    raise BackendUnavailable(
        f"cupy backend unavailable: {local_size} ranks on this node but {devices} GPU(s) visible to rank "
        f"{local_rank}; it needs one GPU per rank (all visible to every rank, or one per rank by CUDA_VISIBLE_DEVICES)"
    )


def launcher_device(env: Mapping[str, str], devices: int) -> int:
    """:func:`device_index` of this process from its launcher's variables (torchrun's, else mpiexec's; a lone
    process is local rank 0 of 1)."""
    for rank_key, size_key in LOCAL_VARIABLES:
        if rank_key in env and size_key in env:
            return device_index(int(env[rank_key]), int(env[size_key]), devices, env.get("CUDA_VISIBLE_DEVICES"))
    return device_index(0, 1, devices, env.get("CUDA_VISIBLE_DEVICES"))
