set -u
mkdir -p /tmp/s && cp -a . /tmp/w && cd /tmp/w
python3 -m pip install -q --no-deps .whl/nvidia_cudnn_frontend*.whl > /tmp/s/pip.log 2>&1
python3 -c "import cudnn; print('cudnn frontend', cudnn.__version__, 'backend', cudnn.backend_version())" >> /tmp/s/pip.log 2>&1
(setsid nohup bash scripts/gpu_session.sh /tmp/s plans/session5/session5c.plan > /tmp/s/session.log 2>&1 &)
