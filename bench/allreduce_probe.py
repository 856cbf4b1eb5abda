"""All-reduce bandwidth between the GPUs of one host (torchrun --nproc_per_node=N): fp32 buffers of
several sizes, the NCCL transport it chose (NCCL_DEBUG=INFO lines go to stderr)."""
import os, time, torch, torch.distributed as dist
dist.init_process_group("nccl")
rank = dist.get_rank(); torch.cuda.set_device(rank)
for mb in (1, 4, 20, 64, 175):
    x = torch.ones(mb * 1024 * 1024 // 4, device="cuda")
    for _ in range(3): dist.all_reduce(x)
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(10): dist.all_reduce(x)
    torch.cuda.synchronize(); dt = (time.perf_counter() - t) / 10
    if rank == 0: print(f"{mb:4d} MB fp32 all-reduce: {dt*1e3:7.2f} ms, algbw {mb/1024/dt:6.1f} GB/s", flush=True)
dist.destroy_process_group()
