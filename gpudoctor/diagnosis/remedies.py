"""The remedy catalogue: each remedy's text in English and Chinese, the guide section it
comes from (the project's guide: gpudoctor/guide/, `gpudoctor guide ID`), a code
snippet, and how a rerun could apply it.

Section ids are those of the guide's headings ([dataloader], [transfer], ...). A remedy
beyond the guide says so (`beyond_guide`).
"""

from __future__ import annotations

from gpudoctor.model import Remedy

LANGS = ("en", "zh")


def _r(
    id: str,
    section: str,
    title: tuple[str, str],
    explanation: tuple[str, str],
    snippet: str,
    flags: tuple[str, ...] = (),
    probe_override: str | None = None,
    beyond_guide: bool = False,
    changes_numerics: bool = False,
) -> Remedy:
    return Remedy(
        id=id,
        guide_section=section,
        title={"en": title[0], "zh": title[1]},
        explanation={"en": explanation[0], "zh": explanation[1]},
        snippet=snippet,
        flags=flags,
        probe_override=probe_override,
        beyond_guide=beyond_guide,
        changes_numerics=changes_numerics,
    )


CATALOGUE: dict[str, Remedy] = {
    r.id: r
    for r in (
        _r(
            "more-workers",
            "dataloader",
            ("Load batches in parallel worker processes", "用多个 worker 进程并行加载数据"),
            (
                "With num_workers=0 the training loop itself loads and transforms every "
                "batch while the GPU waits. Worker processes prepare the next batches in "
                "parallel; use about as many as the cores the job may use per rank.",
                "num_workers=0 时，训练循环自己加载和变换每个批次，GPU 只能等待。"
                "多个 worker 进程会并行准备后续批次；数量约等于每个进程可用的 CPU 核数。",
            ),
            "DataLoader(dataset, batch_size=64, num_workers=4)",
            # Hugging Face TrainingArguments' last (HfArgumentParser knows both spellings)
            flags=(
                "--num-workers",
                "--num_workers",
                "--workers",
                "-j",
                "--dataloader-workers",
                "--dataloader_num_workers",
            ),
            probe_override="dataloader.num_workers",
        ),
        _r(
            "pin-memory",
            "dataloader",
            ("Pin host memory for faster copies", "使用锁页内存加速拷贝"),
            (
                "Page-locked (pinned) host memory lets the copy to the GPU run by DMA and "
                "overlap with compute.",
                "锁页（pinned）内存让到 GPU 的拷贝走 DMA，并能与计算重叠。",
            ),
            "DataLoader(dataset, batch_size=64, num_workers=4, pin_memory=True)",
            flags=("--pin-memory", "--pin_memory"),
            probe_override="dataloader.pin_memory",
        ),
        _r(
            "prefetch",
            "dataloader",
            ("Keep more batches loaded ahead", "让每个 worker 预取更多批次"),
            (
                "prefetch_factor batches per worker are loaded ahead; raise it when the "
                "loading time per batch varies a lot.",
                "每个 worker 预先加载 prefetch_factor 个批次；单批加载时间波动大时可调高。",
            ),
            "DataLoader(dataset, num_workers=4, prefetch_factor=4)",
            flags=("--prefetch-factor", "--prefetch_factor", "--dataloader_prefetch_factor"),
            probe_override="dataloader.prefetch_factor",
        ),
        _r(
            "persistent-workers",
            "dataloader",
            ("Keep the workers alive between epochs", "在各个 epoch 之间保留 worker 进程"),
            (
                "Without persistent_workers the worker processes are started again at "
                "every epoch, which stalls the first steps of each epoch.",
                "不设置 persistent_workers 时，每个 epoch 都会重新启动 worker 进程，"
                "导致每个 epoch 开头的若干步停顿。",
            ),
            "DataLoader(dataset, num_workers=4, persistent_workers=True)",
            probe_override="dataloader.persistent_workers",
            beyond_guide=True,
        ),
        _r(
            "preprocess-offline",
            "storage",
            ("Preprocess once, ahead of training", "提前一次性完成预处理"),
            (
                "Run the costly preprocessing once, save the result with torch.save, and "
                "torch.load it at training time instead of recomputing it every epoch.",
                "把耗时的预处理只做一次，用 torch.save 保存结果，训练时用 torch.load "
                "读取，而不是每个 epoch 重复计算。",
            ),
            "torch.save(preprocessed, 'train.pt')\ndata = torch.load('train.pt')",
        ),
        _r(
            "memmap",
            "storage",
            ("Memory-map very large datasets", "对超大数据集使用内存映射"),
            (
                "np.memmap reads only the pages a batch touches, from the page cache when "
                "they are there, with no parsing.",
                "np.memmap 只读取批次用到的页，命中页缓存时无需再读盘，也无需解析。",
            ),
            'np.memmap("data.bin", dtype="float32", mode="r", shape=(N, D))',
        ),
        _r(
            "local-ssd",
            "storage",
            ("Keep the data on a local SSD", "把数据放在本地 SSD 上"),
            (
                "Network or slow disks hold the loader back; copy the training data to "
                "the machine's local data disk first.",
                "网络盘或慢速磁盘会拖慢数据加载；先把训练数据拷贝到本机数据盘。",
            ),
            "rsync -a /path/to/your/dataset/ /path/to/local/ssd/dataset/  # your own paths",
        ),
        _r(
            "fewer-transforms",
            "storage",
            ("Do less work per sample on the CPU", "减少每个样本的 CPU 变换开销"),
            (
                "The cores are full: more workers cannot help. Move fixed transforms into "
                "offline preprocessing, or run the augmentation on the GPU.",
                "CPU 已经跑满，再加 worker 也无济于事。把固定的变换移到离线预处理，"
                "或把数据增强放到 GPU 上做。",
            ),
            "# decode + resize once offline; keep only random crops/flips per sample",
            beyond_guide=True,
        ),
        _r(
            "defer-sync",
            "transfer",
            ("Stop syncing with the GPU every step", "不要每一步都与 GPU 同步"),
            (
                "Each .item(), .cpu() or print of a CUDA tensor makes the host wait for the "
                "GPU. Keep the loss tensors in a list and turn them into numbers once, at "
                "the end or every N steps.",
                "每次对 CUDA 张量调用 .item()、.cpu() 或打印，主机都要等待 GPU。"
                "把 loss 张量放进列表，最后（或每 N 步）再统一转成数值。",
            ),
            "losses.append(loss.detach())\nif step % 100 == 0:\n    print(torch.stack(losses).mean().item()); losses.clear()",
        ),
        _r(
            "non-blocking",
            "transfer",
            ("Copy batches asynchronously", "异步拷贝批次数据"),
            (
                "Move data to the GPU once, asynchronously, from pinned memory: the copy "
                "overlaps with compute.",
                "从锁页内存异步地把数据一次性拷到 GPU，拷贝与计算重叠。",
            ),
            "x = x.to(device, non_blocking=True)",
        ),
        _r(
            "larger-batch",
            "batch-size",
            ("Raise the batch size", "增大批大小"),
            (
                "Use the largest batch size that fits in GPU memory: try 16, 32, 64, 128, "
                "256 ... one step each, stop at the first out-of-memory error (adjust the "
                "learning rate with it).",
                "使用显存能容纳的最大批大小：依次尝试 16、32、64、128、256……每个跑一步，"
                "遇到第一次显存不足就停止（同时相应调整学习率）。",
            ),
            "DataLoader(dataset, batch_size=256)",
            flags=("--batch-size", "--batch_size", "--bs", "-b", "--per_device_train_batch_size"),
        ),
        _r(
            "smaller-batch",
            "common",
            ("Lower the batch size", "减小批大小"),
            (
                "The job ran out of memory: halve the batch size (and keep the effective "
                "batch with gradient accumulation).",
                "任务显存不足：把批大小减半（可配合梯度累积保持等效批大小）。",
            ),
            "DataLoader(dataset, batch_size=32)",
            flags=("--batch-size", "--batch_size", "--bs", "-b", "--per_device_train_batch_size"),
        ),
        _r(
            "amp",
            "amp",
            ("Use mixed precision (autocast)", "使用混合精度（autocast）"),
            (
                "FP16/BF16 cuts memory use and speeds up math on tensor cores: run forward "
                "and loss under autocast and scale the loss with GradScaler.",
                "FP16/BF16 能减少显存占用并利用 Tensor Core 加速计算：在 autocast 下运行"
                "前向和 loss，并用 GradScaler 缩放 loss。",
            ),
            "with torch.autocast('cuda', dtype=torch.float16):\n    loss = criterion(model(x), y)\n"
            "scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()",
            flags=("--amp", "--fp16", "--bf16", "--mixed-precision"),
            probe_override="autocast",
            changes_numerics=True,
        ),
        _r(
            "grad-accum",
            "grad-accum",
            ("Accumulate gradients over several steps", "梯度累积"),
            (
                "When memory cannot hold a large batch: divide the loss by "
                "accumulation_steps, call backward() every step and step the optimizer "
                "every accumulation_steps steps.",
                "显存放不下大批次时：loss 除以 accumulation_steps，每步都 backward()，"
                "每 accumulation_steps 步才调用一次 optimizer.step() 和 zero_grad()。",
            ),
            "(loss / accum).backward()\nif (i + 1) % accum == 0:\n    optimizer.step(); optimizer.zero_grad()",
            flags=("--grad-accum", "--gradient-accumulation-steps", "--accum-steps"),
        ),
        _r(
            "torch-compile",
            "compile",
            ("Compile the model", "编译模型"),
            (
                "torch.compile fuses many small operations into fewer kernels; it pays "
                "most when a step is many short operations. Measure it with a rerun.",
                "torch.compile 会把许多小算子融合成更少的内核；一步由大量短算子组成时收益最大。"
                "请通过重跑实测效果。",
            ),
            "model = torch.compile(model)",
            flags=("--compile", "--torch-compile"),
            probe_override="compile",
            changes_numerics=True,
        ),
        _r(
            "cuda-graphs",
            "compile",
            ("Replay the step as a CUDA graph", "用 CUDA Graph 重放一步"),
            (
                "When a step is many short kernels, launching them costs more than running "
                "them. torch.compile's reduce-overhead mode records the step's kernels once as "
                "CUDA graphs and launches each graph with one call. It needs the same shapes "
                "every step; measure it with a rerun.",
                "一步由大量短内核组成时，启动它们比运行它们还费时。torch.compile 的 "
                "reduce-overhead 模式把一步的内核录制成 CUDA Graph，之后每个图只需一次调用即可"
                "启动。它要求每步的形状相同；请通过重跑实测效果。",
            ),
            'model = torch.compile(model, mode="reduce-overhead")',
            beyond_guide=True,
            changes_numerics=True,
        ),
        _r(
            "tf32-matmul",
            "amp",
            ("Let float32 matmuls use TF32", "让 float32 矩阵乘法使用 TF32"),
            (
                "On Ampere and later GPUs, TF32 runs float32 matrix multiplies on tensor "
                "cores with a 10-bit mantissa: several times the float32 rate, with no "
                "change to the code's dtypes. Check that the loss still converges.",
                "在 Ampere 及更新的 GPU 上，TF32 让 float32 矩阵乘法以 10 位尾数在 Tensor Core "
                "上运行：速度是 float32 的数倍，代码中的数据类型无需改动。请确认 loss 仍正常收敛。",
            ),
            'torch.set_float32_matmul_precision("high")',
            probe_override="matmul_precision",
            beyond_guide=True,
            changes_numerics=True,
        ),
        _r(
            "fewer-threads",
            "dataloader",
            ("Fewer threads than free cores", "线程数不超过空闲核心数"),
            (
                "The training process's intra-op threads (one per core by default) compete "
                "with the DataLoader workers, and with other processes, for the same cores; "
                "the threads of each op wait for the slowest of them, so one left without a "
                "core stalls every op. Fewer threads in the training process leave the "
                "workers and the busy cores room.",
                "训练进程的算子内线程（默认每个核心一个）与 DataLoader worker 及其他进程争用"
                "同一批核心；每个算子都要等最慢的线程，一个线程抢不到核心就拖住所有算子。"
                "减少训练进程的线程数，可以给 worker 和被占用的核心留出空间。",
            ),
            "torch.set_num_threads(n)  # n: the cores not busy elsewhere, less num_workers",
            probe_override="threads",
            beyond_guide=True,
            changes_numerics=True,
        ),
        _r(
            "cudnn-benchmark",
            "cudnn",
            ("Let cuDNN pick the fastest convolutions", "让 cuDNN 自动选择最快的卷积算法"),
            (
                "With fixed input shapes, cuDNN autotuning finds the fastest convolution "
                "algorithm once and reuses it.",
                "输入尺寸固定时，cuDNN 自动调优只需搜索一次最快的卷积算法并反复使用。",
            ),
            "torch.backends.cudnn.benchmark = True",
            flags=("--cudnn-benchmark", "--benchmark"),
            probe_override="cudnn.benchmark",
        ),
        _r(
            "no-grad",
            "no-grad",
            ("Run inference without gradients", "推理时关闭梯度计算"),
            (
                "Without torch.no_grad() every forward keeps its activations for a backward "
                "that never runs: more memory, more time.",
                "不使用 torch.no_grad() 时，每次前向都会为永远不会执行的反向保存激活值，"
                "浪费显存和时间。",
            ),
            "with torch.no_grad():\n    out = model(x)",
        ),
        _r(
            "evaluate-less",
            "no-grad",
            ("Evaluate less often, on fewer batches", "减少评估的频率和批次数"),
            (
                "Evaluation passes take wall time that trains nothing. Evaluate every few "
                "hundred or thousand steps instead of every few, on a fixed sample of the "
                "validation set rather than all of it, and always under torch.no_grad() "
                "(or torch.inference_mode()).",
                "评估不训练模型，却占用墙钟时间。把评估间隔拉长到数百或数千步一次，"
                "只用验证集的一个固定子集，并始终在 torch.no_grad()（或 "
                "torch.inference_mode()）下运行。",
            ),
            "if step % eval_interval == 0:  # e.g. every 1000 steps\n"
            "    with torch.no_grad():\n"
            "        val_loss = evaluate(model, val_batches[:eval_iters])",
            flags=("--eval-interval", "--eval_interval", "--eval-every", "--eval_steps"),
        ),
        _r(
            "checkpoint-less",
            "profile",
            (
                "Save checkpoints less often, or off the training thread",
                "降低保存检查点的频率，或在后台线程保存",
            ),
            (
                "Each torch.save stops training while the model and optimizer state are "
                "written. Save every N minutes rather than every few steps, keep only the "
                "latest, or write asynchronously (torch.distributed.checkpoint.async_save, "
                "or a copy to CPU handed to a background thread).",
                "每次 torch.save 都会在写出模型和优化器状态时让训练停下来。"
                "改为每隔若干分钟保存一次而不是每几步一次，只保留最新的检查点，"
                "或异步写出（torch.distributed.checkpoint.async_save，"
                "或把拷贝到 CPU 的状态交给后台线程）。",
            ),
            "if time.monotonic() - last_save > 600:  # every 10 minutes\n"
            "    torch.save(state, 'ckpt.pt')\n"
            "    last_save = time.monotonic()",
            flags=("--save-interval", "--save_interval", "--save-every", "--save_steps"),
        ),
        _r(
            "ddp-no-sync",
            "grad-accum",
            (
                "Accumulate gradients without an all-reduce each micro-step",
                "梯度累积时跳过中间步骤的 all-reduce",
            ),
            (
                "Under DDP every backward all-reduces the gradients. Accumulating over "
                "several micro-batches inside model.no_sync() reduces once per optimizer "
                "step: the same effective batch, a fraction of the communication.",
                "DDP 每次 backward 都会 all-reduce 梯度。在 model.no_sync() 中累积若干个"
                "微批次，每次 optimizer.step() 只同步一次：等效批大小不变，通信量成倍减少。",
            ),
            "for i, (x, y) in enumerate(loader):\n"
            "    ctx = model.no_sync() if (i + 1) % accum else contextlib.nullcontext()\n"
            "    with ctx:\n        (criterion(model(x), y) / accum).backward()\n"
            "    if (i + 1) % accum == 0:\n        optimizer.step(); optimizer.zero_grad()",
            flags=("--grad-accum", "--gradient-accumulation-steps", "--accum-steps"),
        ),
        _r(
            "ddp-buckets",
            "multi-gpu",
            ("Larger gradient buckets", "增大梯度桶"),
            (
                "DDP all-reduces gradients in buckets of bucket_cap_mb (25 MB by default) "
                "as backward produces them; larger buckets mean fewer, better-used "
                "collectives, and gradient_as_bucket_view saves a copy.",
                "DDP 按 bucket_cap_mb（默认 25 MB）分桶、边反向边 all-reduce；更大的桶意味着"
                "更少、更高效的集合通信，gradient_as_bucket_view 还能省去一次拷贝。",
            ),
            "model = DDP(model, device_ids=[local_rank], bucket_cap_mb=100,\n"
            "            gradient_as_bucket_view=True)",
            beyond_guide=True,
        ),
        _r(
            "comm-hook-bf16",
            "multi-gpu",
            ("Send gradients in bf16", "以 bf16 传输梯度"),
            (
                "A communication hook halves the bytes each all-reduce moves: gradients "
                "are cast to bf16 for the collective and back afterwards.",
                "通信钩子让每次 all-reduce 传输的数据量减半：梯度在集合通信前转为 bf16，"
                "之后再转回。",
            ),
            "from torch.distributed.algorithms.ddp_comm_hooks import default_hooks\n"
            "model.register_comm_hook(None, default_hooks.bf16_compress_hook)",
            beyond_guide=True,
        ),
        _r(
            "ddp",
            "multi-gpu",
            ("Use DistributedDataParallel", "改用 DistributedDataParallel"),
            (
                "DataParallel runs one process that re-copies the model to every GPU each "
                "step; DistributedDataParallel runs one process per GPU and is the "
                "recommended way, even on one machine.",
                "DataParallel 单进程、每步都把模型复制到各个 GPU；DistributedDataParallel "
                "每个 GPU 一个进程，即使在单机上也是推荐做法。",
            ),
            'dist.init_process_group("nccl")\nmodel = DDP(model, device_ids=[local_rank])\n'
            "# launch: torchrun --nproc_per_node=N train.py",
        ),
    )
}

REMEDY_IDS = tuple(CATALOGUE)
