"""``python -m onnxruntime_ep_mlx``: see cli.py."""

import sys

from .cli import main

sys.exit(main())
