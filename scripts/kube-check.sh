#!/usr/bin/env bash
# Checks deploy/kubernetes offline, as CI does (no cluster needed):
#   scripts/kube-check.sh [VENV]
# - `kubectl kustomize` renders every overlay (single, cluster, and cluster with every
#   component), with throwaway secrets written into a copy of the tree;
# - kubernetes-validate --strict passes for Kubernetes 1.29 and 1.33 (the ServiceMonitor's CRD
#   is not in the bundled schemas: it is validated for its apiVersion/kind only);
# - checkov passes; a policy not met is skipped only by an annotation that gives its reason;
# - scripts/kube-consistency.py: drain timing against the config's timeouts, replica counts in
#   step with expected_replicas.
# The venv (pinned kubernetes-validate and checkov) is made once, in VENV (default
# ~/.cache/floodgate/kube-venv); a stamp names the pins, so a current venv needs no network.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/floodgate/kube-venv}
PINS='kubernetes-validate==1.37.0 checkov==3.3.30'
STAMP="$VENV/.floodgate-pins"
VERSIONS=(1.29.0 1.33.0)

if ! command -v kubectl >/dev/null; then
  echo "kubectl is missing (its kustomize renders the overlays)" >&2
  exit 1
fi
if ! [ -x "$VENV/bin/checkov" ] || [ "$(cat "$STAMP" 2>/dev/null)" != "$PINS" ]; then
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  python3 -m venv "$VENV"
  # shellcheck disable=SC2086 # the pins are words
  "$VENV/bin/pip" install -q $PINS
  echo "$PINS" > "$STAMP"
fi

work=$(mktemp -d /tmp/floodgate-kube.XXXXXX)
trap 'rm -rf "$work"' EXIT
cp -r deploy/kubernetes "$work/"
tree="$work/kubernetes"
token() { "$VENV/bin/python" -c 'import secrets; print(secrets.token_hex(24))'; }
for overlay in single cluster; do
  printf 'ops:%s\n' "$(token)" > "$tree/overlays/$overlay/secrets/admin-token"
done
token > "$tree/overlays/cluster/secrets/registry-secret"
# The cluster overlay with every optional component, so they are rendered and checked too.
mkdir -p "$tree/overlays/cluster-all"
cat > "$tree/overlays/cluster-all/kustomization.yaml" <<'EOF'
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../cluster
components:
  - ../../components/servicemonitor
  - ../../components/hpa-buffer-fill
EOF

rendered=()
for overlay in single cluster cluster-all; do
  kubectl kustomize "$tree/overlays/$overlay" > "$work/$overlay.yaml"
  rendered+=("$work/$overlay.yaml")
  echo "rendered $overlay: $(grep -c '^kind:' "$work/$overlay.yaml") objects"
done

for version in "${VERSIONS[@]}"; do
  for file in "${rendered[@]}"; do
    # ServiceMonitor: no bundled schema (a CRD); everything else strictly.
    out=$("$VENV/bin/kubernetes-validate" --strict -k "$version" "$file" 2>&1) || true
    if grep -E '^ERROR' <<<"$out" | grep -v 'servicemonitor/'; then
      echo "kubernetes-validate $version failed for $(basename "$file")" >&2
      exit 1
    fi
    echo "kubernetes-validate $version: $(basename "$file") ok ($(grep -c '^INFO.*passed' <<<"$out") resources)"
  done
done

"$VENV/bin/checkov" --framework kubernetes --compact --quiet --skip-download \
  $(printf -- '-f %s ' "${rendered[@]}")
echo "checkov: no failed policy"

"$VENV/bin/python" scripts/kube-consistency.py "${rendered[@]}"
