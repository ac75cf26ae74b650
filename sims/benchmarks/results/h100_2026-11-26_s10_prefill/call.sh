# Session 10 call E (one H100): helper branch wt-prefill's prefill-attention grid (its tree from .gpu/prefill.tar,
# its COMMAND.txt as .command).
source .gpu/env.sh
mkdir -p /tmp/t_h && tar xf .gpu/prefill.tar -C /tmp/t_h && mkdir -p /tmp/t_h/.gpu && cp .gpu/env.sh /tmp/t_h/.gpu/ && ln -sfn $PWD/.whl /tmp/t_h/.whl
cd /tmp/t_h && export PYTHONPATH=/tmp/site:/tmp/t_h
echo "== run $(date +%T)"
timeout 500 bash -c "$(cat /tmp/t_h/.command)"; echo "rc=$? $(date +%T)"
cd $OUT && tar czf out.tgz $(ls | grep -v out.tgz) --remove-files; ls -la $OUT
