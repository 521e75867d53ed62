# nstorm image: Python 3.11 with Java 17 for the embedded ZooKeeper and Spark.
#
# BASE is the official Python image by default. Where no image registry answers,
# scripts/build-base-image makes a base from Debian's packages (Python 3.11, Java 17,
# redis-server) and scripts/compose-check passes it: --build-arg BASE=localhost/nstorm-base:...
#
# No USER: the daemons run as root, which supervisors need to set workers' cgroup CPU limits
# (supervisor.worker.cpu.limit). docker-compose.yml publishes ZooKeeper and the UI on 127.0.0.1 only.
ARG BASE=python:3.11-slim
FROM ${BASE}
# Java for the embedded ZooKeeper (a base that has it, the local one, skips this). Debian 13
# images have no openjdk-17: their default JRE (21) runs ZooKeeper and Spark as well.
RUN if ! command -v java >/dev/null 2>&1; then \
        apt-get update \
        && { apt-get install -y --no-install-recommends openjdk-17-jre-headless \
             || apt-get install -y --no-install-recommends default-jre-headless; } \
        && rm -rf /var/lib/apt/lists/*; \
    fi
# A virtual environment: Debian's own python3 refuses system-wide pip installs (PEP 668).
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH NSTORM_HOME=/var/lib/nstorm
WORKDIR /opt/nstorm
# Dependencies first, in their own layer: editing the code does not download them again.
COPY setup.cfg pyproject.toml ./
RUN python3 -c "import configparser; c = configparser.ConfigParser(); c.read('setup.cfg'); \
print(c['options']['install_requires'])" > /tmp/requirements.txt \
    && pip install --no-cache-dir -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt
COPY README.md ./
COPY nstorm nstorm
COPY nimbus nimbus
COPY supervisor supervisor
COPY worker worker
COPY kvstore kvstore
COPY scheduler_otd scheduler_otd
COPY ui ui
COPY topologies topologies
COPY benchmarks benchmarks
RUN pip install --no-cache-dir --no-deps .
