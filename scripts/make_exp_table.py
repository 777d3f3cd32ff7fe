#!/usr/bin/env python3
"""Prints the table of `crates/llm-kernels/src/logistic.rs`: for j = 0..128, the double H_j nearest
to 2^(j/128) and the relative remainder T_j = (2^(j/128) - H_j) / H_j rounded to a double.

    python3 scripts/make_exp_table.py > /tmp/table.rs

Each entry is written as the kernel reads it: [bits of T_j, bits of H_j - (j << 45)], so that
adding n << 45 for n = 128·k + j puts k into the exponent and takes j back out of the bits below
it (the C library's `exp` keeps its table the same way). The powers are computed with 80 decimal
digits; `float()` of a `Decimal` rounds to the nearest double, and no value lies near a tie.
"""
import struct
from decimal import Decimal, getcontext

getcontext().prec = 80


def bits(x):
    return struct.unpack("<Q", struct.pack("<d", x))[0]


print("const TABLE: [[u64; 2]; 128] = [")
for j in range(128):
    exact = Decimal(2) ** (Decimal(j) / Decimal(128))
    nearest = float(exact)
    remainder = float((exact - Decimal(nearest)) / Decimal(nearest))
    print(f"    [0x{bits(remainder):016X}, 0x{(bits(nearest) - (j << 45)) % 2**64:016X}],")
print("];")
