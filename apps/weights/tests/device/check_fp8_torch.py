"""Compares the fp8 kernel's output (written by weights_fp8_device_check) with torch's
float8_e4m3fn on the GPU, bit for bit, using the rules of fabric_lib/weights/fp8.h:
amax per 128x128 block; a block with NaN/inf is poisoned (scale NaN, every byte 0x7f);
amax == 0 gives scale 1; else scale = amax / 448; q = e4m3fn(clamp(x / scale, -448, 448)).

usage: python3 check_fp8_torch.py OUT_DIR
"""
import os
import sys

import torch


def reference(x, rows, cols):
    """x: f32 [rows, cols] on the GPU -> (q uint8 [rows, cols], scales f32 [br, bc])."""
    br, bc = (rows + 127) // 128, (cols + 127) // 128
    pad = torch.zeros(br * 128, bc * 128, dtype=torch.float32, device=x.device)
    pad[:rows, :cols] = x
    blocks = pad.view(br, 128, bc, 128)
    finite = torch.isfinite(blocks).all(dim=3).all(dim=1)              # [br, bc]
    amax = blocks.abs().nan_to_num(0.0, 0.0, 0.0).amax(dim=3).amax(dim=1)
    # Divided by a tensor, not the Python scalar: torch's CUDA division by a scalar multiplies by
    # its reciprocal, which is not the IEEE quotient fp8.h asks for (1 ulp off in half the blocks).
    scale = torch.where(amax == 0, torch.ones_like(amax), amax / torch.full_like(amax, 448.0))
    scale = torch.where(finite, scale, torch.full_like(scale, float("nan")))
    full = scale.repeat_interleave(128, 0).repeat_interleave(128, 1)[:rows, :cols]
    q = (x / full).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8)
    poisoned = (~finite).repeat_interleave(128, 0).repeat_interleave(128, 1)[:rows, :cols]
    q = torch.where(poisoned, torch.full_like(q, 0x7F), q)
    return q, scale


def main():
    out = sys.argv[1]
    passed = failed = 0
    for line in open(os.path.join(out, "manifest.txt")):
        name, rows, cols, pitch, dtype = line.split()
        rows, cols, pitch = int(rows), int(cols), int(pitch)
        raw = open(os.path.join(out, name + ".in"), "rb").read()
        if dtype == "bf16":
            x = torch.frombuffer(bytearray(raw), dtype=torch.int16).view(torch.bfloat16)
        else:
            x = torch.frombuffer(bytearray(raw), dtype=torch.float32)
        x = x.view(rows, pitch)[:, :cols].float().cuda()
        q_ref, s_ref = reference(x, rows, cols)
        q_k = torch.frombuffer(bytearray(open(os.path.join(out, name + ".q"), "rb").read()), dtype=torch.uint8)
        s_k = torch.frombuffer(bytearray(open(os.path.join(out, name + ".s"), "rb").read()), dtype=torch.int32)
        q_bad = int((q_ref.cpu().flatten() != q_k).sum())
        # Scales compared as bits; NaN scales compared as "both NaN" (torch's NaN bits may differ).
        s_ref_c = s_ref.cpu().flatten()
        s_k_f = s_k.view(torch.float32)
        both_nan = torch.isnan(s_ref_c) & torch.isnan(s_k_f)
        s_bad = int(((s_ref_c.view(torch.int32) != s_k) & ~both_nan).sum())
        ok = q_bad == 0 and s_bad == 0
        print(f"{name:28s} torch vs kernel: fp8 bytes differing {q_bad}/{q_k.numel()}, "
              f"scales differing {s_bad}/{s_k.numel()}  {'ok' if ok else 'FAILED'}")
        passed += ok
        failed += not ok
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
