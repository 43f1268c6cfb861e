# ideabench: one image for the API, the workers and the migration step (docs/deploy.md).
#   CPU (default):  docker build -t ideabench .
#   CUDA:           docker build -t ideabench:cuda --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu126 .
FROM python:3.11-slim

# The root file system is read-only in docker-compose.yml and the Kubernetes manifests: whatever a
# process writes (caches, a home directory) goes to /tmp, a tmpfs there.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOME=/tmp \
    XDG_CACHE_HOME=/tmp/.cache

# bubblewrap and libseccomp2: the namespace and seccomp layers of the workers' sandbox, without which a
# worker judges nothing (it fails closed); postgresql-client: `ideabench backup`; util-linux: setpriv,
# with which the entrypoint drops root for uid 10001 (deploy/entrypoint.sh).
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap libseccomp2 postgresql-client util-linux \
 && rm -rf /var/lib/apt/lists/*

# torch, pinned, installed first so the project's range pulls nothing more. TORCH_INDEX picks the
# build: the CPU wheels by default; a CUDA index for the GPU workers (docker-compose.yml's
# gpu-worker passes one). It must carry this exact version for the host's driver.
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
RUN pip install torch==2.13.0 --index-url "${TORCH_INDEX}"

WORKDIR /srv/ideabench
COPY pyproject.toml README.md* alembic.ini ./
COPY app ./app
COPY bench ./bench
COPY tracks ./tracks
COPY workers ./workers
COPY cli ./cli
COPY ideabench_client ./ideabench_client
COPY migrations ./migrations
COPY docs ./docs
COPY deploy/entrypoint.sh /usr/local/bin/ideabench-entrypoint
# Editable: the Alembic migrations are found next to the app package.
# /srv/ideabench-data is the workers' data directory (IDEABENCH_DATA_DIR: seed_secret.json, the
# caches). It exists in the image, owned by uid 10001, so that a fresh named volume mounted there
# takes that owner (Docker copies a path's ownership into a new volume only when the image has the
# path); else the volume's root is root's and the first job's O_CREAT of seed_secret.json fails.
# The project's bytecode is written here: uid 10001 cannot write it beside the sources, so each
# process (every sandboxed child included) would compile the modules it imports at every start.
RUN pip install -e '.[all]' \
 && python -m compileall -q app bench tracks workers cli ideabench_client \
 && groupadd --gid 10001 ideabench \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin ideabench \
 && mkdir -p /srv/ideabench/var /srv/ideabench-data \
 && chown ideabench:ideabench /srv/ideabench/var /srv/ideabench-data \
 && chmod 0700 /srv/ideabench-data \
 && chmod 0755 /usr/local/bin/ideabench-entrypoint
USER 10001:10001

EXPOSE 8000
ENTRYPOINT ["/usr/local/bin/ideabench-entrypoint"]
CMD ["uvicorn", "--factory", "app.main:create_app", "--host", "0.0.0.0", "--port", "8000"]
