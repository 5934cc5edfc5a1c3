# A trainer image with your script's own pip packages: build it FROM the trainer image
# you run (GPU or -cpu), push it, and name it in the job (`spec.image`, `tuneop run --image`).
#   docker build -f manifests/samples/trainer-derived.Dockerfile \
#     --build-arg TRAINER=registry.example.com/ml/trainer:0.1.0 -t registry.example.com/ml/my-trainer:1 .
# (or `buildah bud` with the same arguments). Pin what you add, and never TensorFlow,
# Keras or keras-tuner: the trainer is tested with the versions its image holds, and
# `pip check` below fails the build if an addition needs others.
ARG TRAINER=tuneop/trainer:0.1.0
FROM ${TRAINER}
# The image's virtualenv (/opt/tuneop) belongs to root; the trainer runs as uid 1000.
USER root
RUN pip install --no-cache-dir "tabulate==0.9.0" \
    && pip check
USER 1000
