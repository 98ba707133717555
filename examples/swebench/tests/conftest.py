import os
import sys

# The harness's modules sit one directory up (examples/swebench).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
