# Sourced by the scripts that need a Docker engine (compose-test, fresh-machine-test).
# start_docker_engine installs the engine when missing, sets `docker` (the client, through
# sudo when not root) and starts dockerd when none answers; stop_docker_engine stops only a
# dockerd that start_docker_engine started, and returns once it is gone. Logs go to
# test-output/dockerd.log.

docker_as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

start_docker_engine() {
  scripts/install-packages compose
  docker=(docker); [ "$(id -u)" -eq 0 ] || docker=(sudo docker)
  started_dockerd=
  if "${docker[@]}" info >/dev/null 2>&1; then return 0; fi
  mkdir -p test-output
  printf '\033[1m[docker]\033[0m starting dockerd (log: test-output/dockerd.log)\n' >&2
  docker_as_root sh -c 'nohup dockerd >test-output/dockerd.log 2>&1 & echo $! >test-output/dockerd.pid'
  started_dockerd=$(cat test-output/dockerd.pid)
  for _ in $(seq 60); do "${docker[@]}" info >/dev/null 2>&1 && return 0; sleep 1; done
  printf '\033[1m[docker]\033[0m dockerd did not start (see test-output/dockerd.log)\n' >&2
  return 1
}

stop_docker_engine() {
  [ -n "${started_dockerd:-}" ] || return 0
  docker_as_root kill "$started_dockerd" 2>/dev/null || true
  # Gone before this returns: a next start must not find it still answering, and use it.
  for _ in $(seq 30); do docker_as_root kill -0 "$started_dockerd" 2>/dev/null || return 0; sleep 1; done
  docker_as_root kill -9 "$started_dockerd" 2>/dev/null || true
}
