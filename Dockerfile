# nstorm image: Python 3.11 with Java 17 for the embedded ZooKeeper and Spark.
FROM python:3.11-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/nstorm
COPY setup.cfg pyproject.toml README.md ./
COPY nstorm nstorm
COPY nimbus nimbus
COPY supervisor supervisor
COPY worker worker
COPY kvstore kvstore
COPY scheduler_otd scheduler_otd
COPY ui ui
COPY topologies topologies
COPY benchmarks benchmarks
RUN pip install --no-cache-dir .
ENV NSTORM_HOME=/var/lib/nstorm
