# sourced by every GPU script: carried wheels, offline HF, the hardware key of this card
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/tmp/pip.log 2>&1 || { cat /tmp/pip.log; exit 1; }
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
if nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200; then HW=h200; else HW=h100; fi
export HW
