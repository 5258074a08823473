"""PyTorch's all_reduce (f32 sum, NCCL backend, one process per GPU), timed as the HAL's
`allreduce_sweep` example times its rows: per size, `iters` all-reduces back to back and one
`torch.cuda.synchronize()`, medians over rounds; prints one table from rank 0.

    NCCL_NVLS_ENABLE=0 python3 bench/peers/allreduce_torch.py [RANKS] [ROUNDS] [MAX_BYTES]
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def sizes(limit):
    out = [8]
    while out[-1] * 8 <= limit:
        out.append(out[-1] * 8)
    if out[-1] != limit and limit > 8:
        out.append(limit)
    return out


def iterations(nbytes):
    if nbytes <= 65536:
        return 200
    if nbytes <= 2097152:
        return 100
    if nbytes <= 33554432:
        return 40
    return 10


def rank_main(rank, ranks, rounds, limit, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=ranks, device_id=torch.device("cuda", rank))
    table = sizes(limit)
    buf = torch.ones(limit // 4, dtype=torch.float32, device="cuda")
    for nbytes in table:  # warm every size
        for _ in range(2):
            dist.all_reduce(buf[: nbytes // 4])
    torch.cuda.synchronize()
    samples = [[] for _ in table]
    for _ in range(rounds):
        for i, nbytes in enumerate(table):
            view, iters = buf[: nbytes // 4], iterations(nbytes)
            dist.barrier()
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(view)
            torch.cuda.synchronize()
            samples[i].append((time.perf_counter() - start) / iters)
    if rank == 0:
        print(f"pytorch {torch.__version__} nccl {torch.cuda.nccl.version()}: all_reduce f32 sum, "
              f"{ranks} processes, {rounds} rounds, medians")
        print(f"{'bytes':>10} {'iters':>6} {'torch us':>12} {'torch GB/s':>11}")
        for nbytes, s in zip(table, samples):
            t = sorted(s)[len(s) // 2]
            bus = nbytes * 2 * (ranks - 1) / ranks / t / 1e9
            print(f"{nbytes:>10} {iterations(nbytes):>6} {t * 1e6:>12.2f} {bus:>11.2f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    ranks = int(sys.argv[1]) if len(sys.argv) > 1 else torch.cuda.device_count()
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    limit = int(sys.argv[3]) if len(sys.argv) > 3 else 1 << 30
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    mp.spawn(rank_main, args=(ranks, rounds, limit, 29511), nprocs=ranks)
