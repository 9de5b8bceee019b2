"""Host work that is not input (issue 21): the GPU idles while the host post-processes results or
computes metrics on what it just read back. New code: other models, loops and sizes than the corpus,
tools/gen/timeline_mechanisms.py (whose CPU-optimizer workload this completes), mech_scenarios.py or
extra_scenarios.py. Each has one root cause by construction and a twin with the cause removed.

  python3 host_work_mechanisms.py NAME [NAME ...] --mode {torch,plain} --out DIR [--steps N]
    torch : torch.profiler (CPU + CUDA, with_stack=True: the Python frames the host spends the gaps in;
            record_shapes / profile_memory off), schedule(wait=1, warmup=2, active=N), prof.step() per iteration
    plain : for `nsys profile --capture-range=cudaProfilerApi`: cudaProfilerStart after 3 warm-up iterations,
            cudaProfilerStop after N more (no NVTX of ours: what the host does shows only as no CUDA calls)
GEN_DEVICE=cpu runs every workload at toy sizes on a CPU (only to check the script logic).

Workloads (category built for; "twin" = the same code with the cause removed):
  h_infer_detect_numpy_nms   host_compute   single-stage detector (9-conv backbone, 3 anchors a cell, 20 classes)
                                            on 8 x 3 x 512^2 fp16; every batch the raw head output is copied to
                                            the host and boxes decoded + greedy NMS in NumPy per image
  h_infer_detect_gpu_nms     (twin)         the same detector, decode and a matrix NMS (IoU matrix, suppress by
                                            higher-scoring overlaps) on the GPU; kept boxes stay on the device
  h_train_numpy_metrics      host_compute   1-D conv audio tagger (64 mels x 1024 frames, 6 conv layers, 50 tags),
                                            batch 384, bf16 autocast; every step the probabilities and labels
                                            go to the host (.cpu().numpy()) and per-tag ROC-AUC, F1 and a
                                            confusion matrix are computed in NumPy over the last 8 batches
  h_train_gpu_metrics        (twin)         the same training, the metrics computed with torch ops on the GPU and
                                            kept there (read once, after the loop)
  h_infer_seg_cpu_upsample   host_compute   segmentation net (encoder-decoder, 19 classes at 1/4 resolution) on
                                            4 x 3 x 512 x 1024 fp16; each batch the logits go to the host, where
                                            torch CPU ops upsample them to full size, take the argmax and count
                                            pixels per class (CPU operators with no CUDA calls, not input work)
  h_infer_seg_gpu_upsample   (twin)         the same, upsample / argmax / counts on the GPU, the 19 counts read back
"""
import os
import random
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.append(os.path.join(os.getcwd(), "tools", "gen"))  # harness.py: beside this file, or the checkout's
from harness import (CUDA, DEV, WARM, Session, arguments, capture_ticks, run_each, size, sync,  # noqa: E402,F401
                     torch_profiled, workloads)

HALF = torch.float16 if CUDA else torch.float32


# ============================================================== detection, post-processed on the host
def conv_bn(cin, cout, stride):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.SiLU())


class Detector(nn.Module):
    """Stride-32 backbone, a head of 3 anchors x (4 box + 1 objectness + classes) per cell."""

    def __init__(self, width, classes, anchors=3):
        super().__init__()
        w = width
        chans = [(3, w, 2), (w, w, 1), (w, 2 * w, 2), (2 * w, 2 * w, 1), (2 * w, 4 * w, 2), (4 * w, 4 * w, 1),
                 (4 * w, 8 * w, 2), (8 * w, 8 * w, 1), (8 * w, 8 * w, 2)]
        self.body = nn.Sequential(*[conv_bn(a, b, s) for a, b, s in chans])
        self.head = nn.Conv2d(8 * w, anchors * (5 + classes), 1)
        self.a, self.c = anchors, classes

    def forward(self, x):
        y = self.head(self.body(x))  # B, A*(5+C), H, W
        B, _, H, W = y.shape
        return y.view(B, self.a, 5 + self.c, H, W).permute(0, 3, 4, 1, 2).reshape(B, H * W * self.a, 5 + self.c)


def grid_anchors(h, w, a, stride):
    ys, xs = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    cx = np.repeat(((xs + 0.5) * stride).reshape(-1), a)
    cy = np.repeat(((ys + 0.5) * stride).reshape(-1), a)
    wh = np.tile(np.array([1.0, 2.0, 4.0])[:a] * stride, h * w)
    return np.stack([cx, cy, wh, wh], axis=1).astype(np.float32)


def np_decode(raw, anchors):
    """raw: (N, 5+C) float32 -> boxes (N, 4) x1y1x2y2, score (N,), label (N,)."""
    cx = anchors[:, 0] + raw[:, 0] * anchors[:, 2]
    cy = anchors[:, 1] + raw[:, 1] * anchors[:, 3]
    w = anchors[:, 2] * np.exp(np.clip(raw[:, 2], -4, 4))
    h = anchors[:, 3] * np.exp(np.clip(raw[:, 3], -4, 4))
    obj = 1 / (1 + np.exp(-raw[:, 4]))
    cls = 1 / (1 + np.exp(-raw[:, 5:]))
    label = cls.argmax(1)
    score = obj * cls[np.arange(cls.shape[0]), label]
    return np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 1), score, label


def np_nms(boxes, scores, thr, top):
    """Greedy NMS, one box at a time against the rest (the textbook NumPy loop)."""
    order = scores.argsort()[::-1][:top]
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    keep = []
    while order.size:
        i = order[0]
        keep.append(i)
        rest = order[1:]
        xx1 = np.maximum(boxes[i, 0], boxes[rest, 0])
        yy1 = np.maximum(boxes[i, 1], boxes[rest, 1])
        xx2 = np.minimum(boxes[i, 2], boxes[rest, 2])
        yy2 = np.minimum(boxes[i, 3], boxes[rest, 3])
        inter = np.clip(xx2 - xx1, 0, None) * np.clip(yy2 - yy1, 0, None)
        iou = inter / (area[i] + area[rest] - inter + 1e-9)
        order = rest[iou <= thr]
    return np.array(keep, dtype=np.int64)


def gpu_decode(raw, anchors):
    cx = anchors[:, 0] + raw[..., 0] * anchors[:, 2]
    cy = anchors[:, 1] + raw[..., 1] * anchors[:, 3]
    w = anchors[:, 2] * raw[..., 2].clamp(-4, 4).exp()
    h = anchors[:, 3] * raw[..., 3].clamp(-4, 4).exp()
    cls = raw[..., 5:].sigmoid()
    best, label = cls.max(-1)
    score = raw[..., 4].sigmoid() * best
    return torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], -1), score, label


def gpu_matrix_nms(boxes, scores, thr, top):
    """Batched 'fast NMS': the top boxes by score, their IoU matrix, a box dropped when a higher-scoring
    one overlaps it by more than thr. boxes (B, N, 4), scores (B, N) -> keep mask (B, top), indices."""
    s, idx = scores.topk(min(top, scores.shape[1]), dim=1)
    b = torch.gather(boxes, 1, idx[..., None].expand(-1, -1, 4))
    area = (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
    lt = torch.maximum(b[:, :, None, :2], b[:, None, :, :2])
    rb = torch.minimum(b[:, :, None, 2:], b[:, None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    iou = inter / (area[:, :, None] + area[:, None, :] - inter + 1e-9)
    iou = iou.triu(1)  # row i: overlaps with lower-scoring boxes j > i
    return iou.max(dim=1).values <= thr, idx


@torch.no_grad()
def detect(s, on_gpu):
    width, classes, bs, side, top = size((64, 20, 8, 512, 300), (4, 5, 2, 64, 20))
    model = Detector(width, classes).to(DEV, HALF).eval()
    if CUDA:
        model = model.to(memory_format=torch.channels_last)
    x = torch.randn(bs, 3, side, side, device=DEV, dtype=HALF)
    if CUDA:
        x = x.contiguous(memory_format=torch.channels_last)
    g = side // 32
    anchors = grid_anchors(g, g, 3, 32.0)
    anchors_dev = torch.from_numpy(anchors).to(DEV)
    kept = []
    for _ in range(s.iters):
        raw = model(x)
        if on_gpu:
            boxes, score, _ = gpu_decode(raw.float(), anchors_dev)
            keep, idx = gpu_matrix_nms(boxes, score, 0.5, top)
            kept.append(keep.sum(1))  # stays on the device
        else:
            out = raw.float().cpu().numpy()  # one device-to-host copy of the whole head output
            n = 0
            for img in out:
                boxes, score, _ = np_decode(img, anchors)
                cand = np.flatnonzero(score > 0.05)
                n += np_nms(boxes[cand], score[cand], 0.5, top).size
            kept.append(n)
        s.tick()
    sync()
    if on_gpu and kept:
        torch.stack(kept).cpu()


def w_h_infer_detect_numpy_nms(s):
    detect(s, on_gpu=False)


def w_h_infer_detect_gpu_nms(s):
    detect(s, on_gpu=True)


# ============================================================== metrics every step, in NumPy
class AudioTagger(nn.Module):
    def __init__(self, mels, width, layers, tags):
        super().__init__()
        mods, c = [], mels
        for i in range(layers):
            mods += [nn.Conv1d(c, width, 5, 2 if i % 2 else 1, 2), nn.BatchNorm1d(width), nn.GELU()]
            c = width
        self.body = nn.Sequential(*mods)
        self.head = nn.Linear(width, tags)

    def forward(self, x):
        return self.head(self.body(x).mean(-1))


def np_metrics(probs, labels, tags):
    """Per-tag ROC-AUC (rank statistic), F1 at 0.5 and a tag confusion matrix of the argmax."""
    auc = np.zeros(tags)
    for t in range(tags):
        pos = labels[:, t] > 0.5
        npos, nneg = pos.sum(), (~pos).sum()
        if npos == 0 or nneg == 0:
            continue
        ranks = probs[:, t].argsort().argsort() + 1
        auc[t] = (ranks[pos].sum() - npos * (npos + 1) / 2) / (npos * nneg)
    pred = probs > 0.5
    tp = (pred & (labels > 0.5)).sum(0)
    f1 = 2 * tp / np.maximum(pred.sum(0) + (labels > 0.5).sum(0), 1)
    conf = np.zeros((tags, tags), dtype=np.int64)
    np.add.at(conf, (labels.argmax(1), probs.argmax(1)), 1)
    return auc.mean(), f1.mean(), np.trace(conf) / conf.sum()


def torch_metrics(probs, labels):
    tags = probs.shape[1]
    pos = labels > 0.5
    ranks = probs.argsort(0).argsort(0).float() + 1
    npos, nneg = pos.sum(0).float(), (~pos).sum(0).float()
    auc = ((ranks * pos).sum(0) - npos * (npos + 1) / 2) / (npos * nneg).clamp(min=1)
    pred = probs > 0.5
    f1 = 2 * (pred & pos).sum(0) / (pred.sum(0) + pos.sum(0)).clamp(min=1)
    conf = torch.bincount(labels.argmax(1) * tags + probs.argmax(1), minlength=tags * tags)
    return torch.stack([auc.mean(), f1.float().mean(), conf.view(tags, tags).diagonal().sum() / conf.sum()])


def tagger_train(s, on_gpu):
    mels, width, layers, tags, bs, frames, window = size((64, 384, 6, 50, 384, 1024, 8), (8, 16, 2, 6, 16, 32, 3))
    model = AudioTagger(mels, width, layers, tags).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=CUDA)
    xs = torch.randn(4, bs, mels, frames, device=DEV)
    ys = (torch.rand(4, bs, tags, device=DEV) < 0.1).float()
    hist_p, hist_y, results = [], [], []
    for it in range(s.iters):
        x, y = xs[it % 4], ys[it % 4]
        with torch.autocast(DEV, dtype=torch.bfloat16):
            logits = model(x)
        loss = F.binary_cross_entropy_with_logits(logits.float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        probs = logits.detach().float().sigmoid()
        if on_gpu:
            hist_p, hist_y = (hist_p + [probs])[-window:], (hist_y + [y])[-window:]
            results.append(torch_metrics(torch.cat(hist_p), torch.cat(hist_y)))
        else:
            hist_p = (hist_p + [probs.cpu().numpy()])[-window:]
            hist_y = (hist_y + [y.cpu().numpy()])[-window:]
            results.append(np_metrics(np.concatenate(hist_p), np.concatenate(hist_y), tags))
        s.tick()
    sync()
    if on_gpu and results:
        torch.stack(results).cpu()


def w_h_train_numpy_metrics(s):
    tagger_train(s, on_gpu=False)


def w_h_train_gpu_metrics(s):
    tagger_train(s, on_gpu=True)


# ============================================================== segmentation, upsampled by CPU operators
class SegNet(nn.Module):
    def __init__(self, w, classes):
        super().__init__()
        self.enc = nn.Sequential(conv_bn(3, w, 2), conv_bn(w, 2 * w, 2), conv_bn(2 * w, 4 * w, 2), conv_bn(4 * w, 4 * w, 1),
                                 conv_bn(4 * w, 8 * w, 2), conv_bn(8 * w, 8 * w, 1))
        self.up = nn.Sequential(nn.ConvTranspose2d(8 * w, 4 * w, 2, 2), nn.BatchNorm2d(4 * w), nn.SiLU(),
                                nn.ConvTranspose2d(4 * w, 2 * w, 2, 2), nn.BatchNorm2d(2 * w), nn.SiLU())
        self.cls = nn.Conv2d(2 * w, classes, 1)

    def forward(self, x):
        return self.cls(self.up(self.enc(x)))  # 1/4 resolution


@torch.no_grad()
def segment(s, on_gpu):
    w, classes, bs, hh, ww = size((48, 19, 4, 512, 1024), (4, 5, 2, 32, 64))
    model = SegNet(w, classes).to(DEV, HALF).eval()
    x = torch.randn(bs, 3, hh, ww, device=DEV, dtype=HALF)
    counts = []
    for _ in range(s.iters):
        logits = model(x)
        if on_gpu:
            full = F.interpolate(logits.float(), size=(hh, ww), mode="bilinear", align_corners=False)
            counts.append(torch.bincount(full.argmax(1).flatten(), minlength=classes).cpu())  # 19 numbers
        else:
            full = F.interpolate(logits.float().cpu(), size=(hh, ww), mode="bilinear", align_corners=False)
            counts.append(torch.bincount(full.argmax(1).flatten(), minlength=classes))
        s.tick()
    sync()


def w_h_infer_seg_cpu_upsample(s):
    segment(s, on_gpu=False)


def w_h_infer_seg_gpu_upsample(s):
    segment(s, on_gpu=True)


WORKLOADS = workloads(globals(), "w_h_")


def run_torch(name, fn, steps, out):
    torch_profiled(fn, steps, os.path.join(out, f"{name}.pt.trace.json"),
                   record_shapes=False, profile_memory=False, with_stack=True)


def run_plain(name, fn, steps):
    fn(Session(steps + WARM, tick=capture_ticks(steps)))


def main():
    a = arguments(WORKLOADS, 4)

    def before(name):
        torch.manual_seed(0)
        random.seed(0)
        np.random.seed(0)

    def run_one(name):
        if a.mode == "torch":
            run_torch(name, WORKLOADS[name], a.steps, a.out)
        else:
            run_plain(name, WORKLOADS[name], a.steps)

    def after(name):
        if CUDA:
            torch.cuda.empty_cache()
    run_each(a, run_one, before, after)


if __name__ == "__main__":
    main()
