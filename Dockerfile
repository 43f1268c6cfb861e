# ideabench: one image for the API, the workers and the migration step.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# bubblewrap and libseccomp2: the namespace and seccomp layers of the workers' sandbox, without which a
# worker judges nothing (it fails closed); postgresql-client: `ideabench backup`.
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap libseccomp2 postgresql-client \
 && rm -rf /var/lib/apt/lists/*

# The CPU build of torch, pinned, installed first so the project's range pulls nothing more.
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu

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
# Editable: the Alembic migrations are found next to the app package.
RUN pip install -e '.[all]' \
 && useradd --create-home --uid 10001 ideabench \
 && mkdir -p /srv/ideabench/var && chown ideabench /srv/ideabench/var
USER ideabench

EXPOSE 8000
CMD ["uvicorn", "--factory", "app.main:create_app", "--host", "0.0.0.0", "--port", "8000"]
