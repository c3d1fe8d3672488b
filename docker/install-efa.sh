#!/usr/bin/env bash
# Installs the AWS EFA userspace stack into an image: libfabric (/opt/amazon/efa),
# Open MPI 4 (/opt/amazon/openmpi, the flavour mpirun_kit's launcher targets) and
# the aws-ofi-nccl plugin (/opt/amazon/ofi-nccl).  Used by both stages of
# docker/Dockerfile: the build stage needs mpicc and the MPI headers to compile
# mpi4py, the runtime stage needs the libraries.
#
#   bash install-efa.sh VERSION [SHA256]
#
# --skip-kmod: the EFA kernel module belongs to the host, never to a container.
# --skip-limit-conf: memlock limits come from the container runtime (SageMaker sets them).
# --mpi=openmpi4: only Open MPI 4 (the installer's documented form); the launcher builds
#   Open MPI 4 mpirun argv.
# --no-verify: the GPG check needs gpg and the AWS key in the image; pass SHA256
#   (from a tarball you verified once) to pin the exact bytes instead.
set -euo pipefail

version="${1:?usage: install-efa.sh VERSION [SHA256]}"
sha256="${2:-}"
url="https://efa-installer.amazonaws.com/aws-efa-installer-${version}.tar.gz"

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends ca-certificates curl >/dev/null

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
curl --fail --silent --show-error --location --retry 3 -o "$work/efa.tar.gz" "$url"
if [ -n "$sha256" ]; then
  echo "$sha256  $work/efa.tar.gz" | sha256sum --check --strict -
fi
tar -xzf "$work/efa.tar.gz" -C "$work"
(cd "$work/aws-efa-installer" && ./efa_installer.sh -y --skip-kmod --skip-limit-conf --no-verify --mpi=openmpi4)

# NCCL dlopen()s its net plugin by name; put the plugin and libfabric on the
# loader path through ld.so.conf rather than LD_LIBRARY_PATH, so an empty
# LD_LIBRARY_PATH in the base image never turns into "search the current directory".
printf '%s\n' /opt/amazon/efa/lib /opt/amazon/openmpi/lib \
  /opt/amazon/ofi-nccl/lib/x86_64-linux-gnu /opt/amazon/ofi-nccl/lib >/etc/ld.so.conf.d/50-mpirun-kit-efa.conf
ldconfig

rm -rf /var/lib/apt/lists/*
