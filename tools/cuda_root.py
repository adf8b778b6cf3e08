#!/usr/bin/env python3
"""Prints the CUDA toolkit root for the nvcc given as argument (bin/nvcc -> root)."""
import os, shutil, sys
nvcc = shutil.which(sys.argv[1]) or sys.argv[1]
print(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
