"""What a run may need: any machine, or an NVIDIA GPU with a CUDA build of torch.

Its own module: the command line names the devices in `check --device`'s choices on every call,
and reads nothing else of the model for it.
"""

from __future__ import annotations

from typing import Literal, get_args

Device = Literal["cpu", "cuda"]
DEVICES: tuple[Device, ...] = get_args(Device)
