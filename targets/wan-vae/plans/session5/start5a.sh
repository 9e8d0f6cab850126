set -u
mkdir -p /tmp/s && cp -a . /tmp/w && cd /tmp/w
pip install -q --no-deps .whl/nvidia_cudnn_frontend*.whl > /tmp/s/pip.log 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > /tmp/s/gpu.txt
( timeout 300 python3 scripts/probe_conv_engines.py --out /tmp/s/probe_conv_engines.md > /tmp/s/probe.log 2>&1
  setsid nohup bash scripts/gpu_session.sh /tmp/s plans/session5/session5a.plan > /tmp/s/session.log 2>&1 ) > /dev/null 2>&1 &
