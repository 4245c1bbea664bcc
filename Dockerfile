# toolwire: OpenAI-compatible chat completions in front of a raw-completion backend.
# Configure with TOOLWIRE_* environment variables (see `toolwire serve --help`), e.g.
#   docker run -e TOOLWIRE_BACKEND=http://vllm:8000 -e TOOLWIRE_TOOL_CALL_PARSER=qwen25 -p 8000:8000 toolwire

FROM python:3.11-slim AS build
WORKDIR /src
RUN python -m venv /opt/toolwire
COPY pyproject.toml README.md ./
COPY app ./app
COPY parsers ./parsers
COPY detectors ./detectors
RUN /opt/toolwire/bin/pip install --no-cache-dir --disable-pip-version-check .

FROM python:3.11-slim
RUN useradd --system --uid 10001 --home-dir /home/toolwire --create-home toolwire
COPY --from=build /opt/toolwire /opt/toolwire
ENV PATH=/opt/toolwire/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    TOOLWIRE_HOST=0.0.0.0 \
    TOOLWIRE_PORT=8000
USER toolwire
WORKDIR /home/toolwire
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health' % os.environ.get('TOOLWIRE_PORT', '8000'), timeout=4)"]
ENTRYPOINT ["toolwire", "serve"]
