#!/bin/sh
# The image's entrypoint (docs/deploy.md, "Containers"): every service starts through it.
#
# 1. `<NAME>_FILE` secrets: for each variable below that is unset while `<NAME>_FILE` names a
#    readable file, NAME is exported with the file's content (Docker secrets, Kubernetes secret
#    volumes), so no secret has to sit in the compose file or the pod spec's env.
# 2. Started as root (the workers only: `user: "0:0"` / runAsUser 0), it gives the sandbox a
#    cgroup v2 subtree, then drops to uid 10001 for good:
#      - every process of the container's cgroup namespace root (this shell; docker-init when
#        `init: true`) moves into the leaf `<root>/worker`: cgroup v2 enables controllers for
#        children only in a cgroup without processes of its own;
#      - `+memory +pids` go into the root's cgroup.subtree_control, so each sandboxed child gets
#        its own cgroup (memory and process limits, cgroup.kill) as a sibling of `worker`
#        (bench/sandbox/cgroups.py, _v2_parent);
#      - the root cgroup directory and its cgroup.procs are handed to uid 10001 (cgroup
#        delegation): it may create and remove its children's cgroups and move its children
#        into them, never change the container's own limits (memory.max, pids.max stay root's).
#    It needs a private cgroup namespace and a writable /sys/fs/cgroup (compose: `cgroup:
#    private` and `security_opt: writable-cgroups=true`; Kubernetes: a runtime handler with
#    cgroup_writable), CAP_CHOWN (the delegation) and CAP_SETUID/CAP_SETGID (the drop). The
#    worker itself runs with no capability: setpriv clears them all at the switch to 10001.
#    Where the cgroup file system is read-only it says so and goes on: the worker's own start
#    check then reports the missing cgroup layers, and with IDEABENCH_REQUIRE_FULL_ISOLATION=1
#    it judges nothing (fails closed).
# 3. exec the command.
set -eu

for name in DATABASE_URL BROKER_URL IDEABENCH_RATE_LIMIT_STORAGE IDEABENCH_SESSION_SECRET \
            IDEABENCH_SEED_SECRET; do
    eval "value=\${$name:-}" "file=\${${name}_FILE:-}"
    if [ -z "$value" ] && [ -n "$file" ]; then
        if [ ! -r "$file" ]; then
            echo "ideabench-entrypoint: ${name}_FILE=$file is not readable" >&2
            exit 78
        fi
        value=$(cat "$file")
        export "$name=$value"
    fi
done
unset value file

RUN_AS=${IDEABENCH_RUN_AS:-10001}
CG=${IDEABENCH_CGROUP_ROOT:-/sys/fs/cgroup}  # overridden only by tests/app/test_deploy_files.py

delegate_cgroup() {
    # Already done (a health check or `docker exec` through this entrypoint): nothing to do.
    [ -d "$CG/worker" ] && return 0
    if [ ! -f "$CG/cgroup.controllers" ]; then
        echo "ideabench-entrypoint: no cgroup v2 at $CG; the sandbox's cgroup layers will be missing" >&2
        return 0
    fi
    if ! mkdir "$CG/worker" 2>/dev/null; then
        echo "ideabench-entrypoint: $CG is read-only (no writable cgroup: see docs/deploy.md);" \
             "the sandbox's cgroup layers will be missing" >&2
        return 0
    fi
    for attempt in 1 2 3 4 5; do
        for pid in $(cat "$CG/cgroup.procs"); do
            echo "$pid" > "$CG/worker/cgroup.procs" 2>/dev/null || true
        done
        if echo "+memory +pids" > "$CG/cgroup.subtree_control" 2>/dev/null; then
            chown "$RUN_AS" "$CG" "$CG/cgroup.procs"
            echo "ideabench-entrypoint: cgroup delegated: the worker runs in $CG/worker," \
                 "its children's cgroups go next to it" >&2
            return 0
        fi
        sleep 0.2  # a process joined the root meanwhile (an exec): move it too
    done
    echo "ideabench-entrypoint: could not enable memory and pids in $CG/cgroup.subtree_control" \
         "(controllers here: $(cat "$CG/cgroup.controllers")); the sandbox's cgroup layers will be missing" >&2
}

if [ "$(id -u)" = 0 ]; then
    delegate_cgroup
    exec setpriv --reuid="$RUN_AS" --regid="$RUN_AS" --clear-groups --inh-caps=-all \
        --no-new-privs -- "$@"
fi
exec "$@"
