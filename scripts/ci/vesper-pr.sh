#!/usr/bin/env bash
# vesper-pr.sh: a Vesper preview environment for a pull request (GitHub) or a merge request
# (GitLab), with one comment on it that says where the preview is and what state it is in.
#
#   vesper-pr.sh up     apply the preview with the new image, wait until it is Ready, then post
#                       (or update) the comment: URL, phase, expiry. Exit 1 or 3 (vesperctl's
#                       exit code) if it does not become Ready; the comment then says Failed, why.
#   vesper-pr.sh down   delete the preview and wait until it is gone, then update the comment
#                       to say so (a pull request that never had a comment gets none).
#
# Used by action.yml (GitHub Actions) and ci/gitlab/vesper-preview.gitlab-ci.yml (GitLab CI);
# docs/vesper/ci.md explains the set-up. It talks to two services only: the Kubernetes API
# server (through vesperctl and the kubeconfig) and the Git host's REST API (through curl).
# Needs bash, curl, jq and vesperctl.
#
# Settings, all from the environment:
#   VESPER_GIT_HOST     github or gitlab (default: github under GitHub Actions, gitlab under
#                       GitLab CI)
#   VESPER_IMAGE        the image to run (up only), pinned by a tag or a digest
#   VESPER_NAME         the preview's name (default pr-<number>); a DNS label
#   VESPER_NAMESPACE    the namespace of the preview (default: the kubeconfig context's)
#   VESPER_CONTEXT      the kubeconfig context (default: the current one)
#   VESPER_TTL          the TTL of a NEW preview (default: the CRD's, 24h). An existing preview
#                       keeps its expiry: a push must not shorten a TTL someone extended.
#   VESPER_TIMEOUT      how long to wait for Ready or for the deletion (default 10m)
#   VESPER_PR_NUMBER    the pull/merge request number (default: from the CI's own variables)
#   VESPER_COMMIT       the commit being previewed, shown in the comment (optional)
#   VESPER_DOTENV       a file to write VESPER_URL, VESPER_PHASE, VESPER_EXPIRES_AT to (GitLab's
#                       dotenv report sets the environment's URL from it)
#   VESPERCTL           the vesperctl binary (default: vesperctl on PATH)
#   KUBECONFIG          read by vesperctl, as kubectl reads it
# GitHub:  GITHUB_TOKEN (needs pull-requests: write), GITHUB_REPOSITORY, GITHUB_API_URL (default
#          https://api.github.com), GITHUB_EVENT_PATH (for the number), GITHUB_OUTPUT (outputs
#          url, phase, expires-at), GITHUB_SERVER_URL and GITHUB_RUN_ID (a link to the run).
# GitLab:  VESPER_GITLAB_TOKEN (a project access token with the api scope: CI_JOB_TOKEN cannot
#          write notes), CI_API_V4_URL, CI_PROJECT_ID, CI_MERGE_REQUEST_IID, CI_COMMIT_SHA,
#          CI_JOB_URL.
#
# Exit codes: 0 done; 1 a failure (the preview failed, the API server or the Git host refused);
# 2 a setting is missing or wrong; 3 timed out waiting (as vesperctl).
set -euo pipefail

log() { printf 'vesper-pr: %s\n' "$*" >&2; }
# die CODE MESSAGE...: say why and stop.
die() {
  local code=$1
  shift
  printf 'vesper-pr: error: %s\n' "$*" >&2
  exit "$code"
}

mode=${1:-}
case "$mode" in
  up | down) ;;
  -h | --help)
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
    exit 0
    ;;
  *) die 2 "usage: vesper-pr.sh up|down (see the comments at the top of this script)" ;;
esac

for tool in curl jq; do
  command -v "$tool" >/dev/null 2>&1 || die 2 "$tool is required (apt-get install -y $tool)"
done
VESPERCTL=${VESPERCTL:-vesperctl}
command -v "$VESPERCTL" >/dev/null 2>&1 || die 2 "vesperctl not found (looked for '$VESPERCTL'); install it or set VESPERCTL"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# --- Which Git host, which pull request -------------------------------------------------------

host=${VESPER_GIT_HOST:-}
if [ -z "$host" ]; then
  if [ "${GITHUB_ACTIONS:-}" = true ]; then
    host=github
  elif [ "${GITLAB_CI:-}" = true ]; then
    host=gitlab
  else
    die 2 "VESPER_GIT_HOST is not set (github or gitlab) and this is neither GitHub Actions nor GitLab CI"
  fi
fi

# The token goes into a header file in $work (mode 700) that curl reads with -H @file: never
# on a command line, where other processes of the runner could read it.
case "$host" in
  github)
    api_url=${GITHUB_API_URL:-https://api.github.com}
    api_url=${api_url%/}
    repo=${GITHUB_REPOSITORY:?GITHUB_REPOSITORY (owner/name) is required}
    number=${VESPER_PR_NUMBER:-}
    if [ -z "$number" ] && [ -n "${GITHUB_EVENT_PATH:-}" ] && [ -f "$GITHUB_EVENT_PATH" ]; then
      number=$(jq -r '.pull_request.number // .number // empty' "$GITHUB_EVENT_PATH")
    fi
    [ -n "${GITHUB_TOKEN:-}" ] || die 2 "GITHUB_TOKEN is required (the action passes github.token; the job needs permissions: pull-requests: write)"
    {
      printf 'Authorization: Bearer %s\n' "$GITHUB_TOKEN"
      printf 'Accept: application/vnd.github+json\n'
      printf 'X-GitHub-Api-Version: 2022-11-28\n'
    } >"$work/auth"
    commit=${VESPER_COMMIT:-}
    run_url=""
    if [ -n "${GITHUB_RUN_ID:-}" ]; then
      run_url="${GITHUB_SERVER_URL:-https://github.com}/$repo/actions/runs/$GITHUB_RUN_ID"
    fi
    ;;
  gitlab)
    api_url=${CI_API_V4_URL:?CI_API_V4_URL is required (GitLab CI sets it)}
    api_url=${api_url%/}
    project=${CI_PROJECT_ID:?CI_PROJECT_ID is required (GitLab CI sets it)}
    number=${VESPER_PR_NUMBER:-${CI_MERGE_REQUEST_IID:-}}
    [ -n "${VESPER_GITLAB_TOKEN:-}" ] || die 2 "VESPER_GITLAB_TOKEN is required: a project access token with the api scope (CI_JOB_TOKEN cannot write merge request notes); see docs/vesper/ci.md"
    printf 'PRIVATE-TOKEN: %s\n' "$VESPER_GITLAB_TOKEN" >"$work/auth"
    commit=${VESPER_COMMIT:-${CI_COMMIT_SHA:-}}
    run_url=${CI_JOB_URL:-}
    ;;
  *) die 2 "VESPER_GIT_HOST is '$host': use github or gitlab" ;;
esac
[[ "$number" =~ ^[0-9]+$ ]] || die 2 "no pull/merge request number (got '$number'): run on pull_request events (GitHub) or merge request pipelines (GitLab), or set VESPER_PR_NUMBER"

# --- The preview ------------------------------------------------------------------------------

name=${VESPER_NAME:-pr-$number}
if ! [[ "$name" =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]] || [ ${#name} -gt 63 ]; then
  die 2 "the preview name '$name' is not a DNS label: lower-case letters, digits and '-', starting and ending with a letter or digit, at most 63 characters"
fi
image=${VESPER_IMAGE:-}
if [ "$mode" = up ] && [ -z "$image" ]; then
  die 2 "VESPER_IMAGE (the action's 'image' input) is required to bring a preview up"
fi
timeout=${VESPER_TIMEOUT:-10m}

# vesperctl with the cluster settings given: `vctl get pr-1 -o json`.
vctl_flags=()
[ -n "${VESPER_NAMESPACE:-}" ] && vctl_flags+=(--namespace "$VESPER_NAMESPACE")
[ -n "${VESPER_CONTEXT:-}" ] && vctl_flags+=(--context "$VESPER_CONTEXT")
vctl() { "$VESPERCTL" "$@" ${vctl_flags[@]+"${vctl_flags[@]}"}; }

# run_vesperctl ARGS...: run it, show its output in the log, keep stderr in $vctl_err and the
# exit code in $vctl_rc (the script goes on: the caller decides what a failure means).
vctl_rc=0
vctl_err=""
run_vesperctl() {
  log "vesperctl $*"
  vctl_rc=0
  vctl "$@" >"$work/vctl.out" 2>"$work/vctl.err" || vctl_rc=$?
  cat "$work/vctl.out" >&2
  cat "$work/vctl.err" >&2
  vctl_err=$(cat "$work/vctl.err")
}

# Read the preview: sets $state (present, deleting, absent) and $namespace, and leaves its JSON
# in $work/preview.json. The namespace is the preview's own, or, when it does not exist, the one
# vesperctl looked in ("... not found in namespace team-a"): the comment's marker names it.
# Returns 1, with vesperctl's message on stderr, when the cluster cannot be read.
read_preview() {
  state=absent
  if vctl get "$name" -o json >"$work/preview.json" 2>"$work/get.err"; then
    namespace=$(jq -r '.metadata.namespace' "$work/preview.json")
    if [ "$(jq -r '.metadata.deletionTimestamp // empty' "$work/preview.json")" ]; then
      state=deleting
    else
      state=present
    fi
    return 0
  fi
  echo '{}' >"$work/preview.json"
  if grep -q 'not found in namespace' "$work/get.err"; then
    namespace=$(sed -n 's/.*not found in namespace \([a-z0-9.-]*\).*/\1/p' "$work/get.err" | head -n1)
    return 0
  fi
  # Anything else (no kubeconfig, no access, no CRD) is a failure the job must show as it is.
  cat "$work/get.err" >&2
  return 1
}

# The fields the comment and the outputs show, from $work/preview.json.
field() { jq -r "$1 // empty" "$work/preview.json"; }

# --- The Git host's REST API ------------------------------------------------------------------

# api METHOD URL [JSON]: one request. The answer's body is left in $work/body, its headers in
# $work/headers. An HTTP error stops the script with the status, the body, and what to check.
api() {
  local method=$1 url=$2 data=${3:-} status
  local args=(--silent --show-error --request "$method" --header @"$work/auth"
    --output "$work/body" --dump-header "$work/headers" --write-out '%{http_code}'
    --connect-timeout 10 --max-time 60)
  if [ "$method" = GET ]; then
    # Reads are safe to repeat; writes are not (a repeated POST would add a second comment).
    args+=(--retry 3 --retry-connrefused)
  fi
  if [ -n "$data" ]; then
    printf '%s' "$data" >"$work/request"
    args+=(--header 'Content-Type: application/json' --data-binary @"$work/request")
  fi
  if ! status=$(curl "${args[@]}" "$url"); then
    die 1 "$method $url: could not reach the $host API (curl failed, see above)"
  fi
  if [ "$status" -ge 400 ] 2>/dev/null || ! [ "$status" -ge 200 ] 2>/dev/null; then
    api_failed "$method" "$url" "$status"
  fi
}

api_failed() {
  local method=$1 url=$2 status=$3 hint=""
  case "$host:$status" in
    github:401) hint="the token was refused: GITHUB_TOKEN (the action's github-token input) is missing, expired or wrong" ;;
    github:403 | github:404)
      hint="the token cannot write comments on pull request #$number of $repo: give the job 'permissions: pull-requests: write' (or 'issues: write'). A pull request from a fork gets a read-only token: previews of forks are not supported (see docs/vesper/ci.md)"
      ;;
    gitlab:401) hint="the token was refused: VESPER_GITLAB_TOKEN is missing, expired or revoked" ;;
    gitlab:403 | gitlab:404)
      hint="the token cannot write notes on merge request !$number of project $project: VESPER_GITLAB_TOKEN must be a project (or group) access token with the 'api' scope and at least the Reporter role (CI_JOB_TOKEN cannot write notes)"
      ;;
  esac
  {
    printf 'vesper-pr: error: %s %s: the %s API answered %s\n' "$method" "$url" "$host" "$status"
    printf '%s\n' "$(head -c 2000 "$work/body" 2>/dev/null)"
    [ -n "$hint" ] && printf 'vesper-pr: %s\n' "$hint"
  } >&2
  exit 1
}

# The value of a response header (case-insensitive), without its CR.
header() { sed -n "s/^$1: *//Ip" "$work/headers" | tr -d '\r' | tail -n1; }

# The comment is found by a hidden marker on its first line: one comment per preview, however
# many runs, and a pull request may have several previews (other names or namespaces).
marker() { printf '<!-- vesper-preview: %s/%s -->' "$namespace" "$name"; }

# find_comment: sets $comment_id to the id of the comment starting with the marker, or "".
# Both APIs return at most 100 per page; every page is read until the marker is found.
find_comment() {
  comment_id=""
  local page=1 count next
  while :; do
    case "$host" in
      github) api GET "$api_url/repos/$repo/issues/$number/comments?per_page=100&page=$page" ;;
      gitlab) api GET "$api_url/projects/$project/merge_requests/$number/notes?per_page=100&page=$page&sort=asc&order_by=created_at" ;;
    esac
    comment_id=$(jq -r --arg m "$(marker)" \
      '[.[] | select((.body // "") | startswith($m))][0].id // empty' "$work/body")
    [ -n "$comment_id" ] && return 0
    case "$host" in
      github)
        # The last page is short, or has no Link rel="next".
        count=$(jq 'length' "$work/body")
        [ "$count" -lt 100 ] && return 0
        grep -qi '^link:.*rel="next"' "$work/headers" || return 0
        page=$((page + 1))
        ;;
      gitlab)
        next=$(header x-next-page)
        [ -n "$next" ] || return 0
        page=$next
        ;;
    esac
  done
}

# write_comment BODY: update the preview's comment, or post it if there is none yet.
write_comment() {
  local payload
  payload=$(jq -n --arg body "$1" '{body: $body}')
  if [ -n "$comment_id" ]; then
    case "$host" in
      github) api PATCH "$api_url/repos/$repo/issues/comments/$comment_id" "$payload" ;;
      gitlab) api PUT "$api_url/projects/$project/merge_requests/$number/notes/$comment_id" "$payload" ;;
    esac
    log "updated comment $comment_id"
  else
    case "$host" in
      github) api POST "$api_url/repos/$repo/issues/$number/comments" "$payload" ;;
      gitlab) api POST "$api_url/projects/$project/merge_requests/$number/notes" "$payload" ;;
    esac
    comment_id=$(jq -r '.id' "$work/body")
    log "posted comment $comment_id"
  fi
}

# --- The comment ---------------------------------------------------------------------------

# comment HEADLINE [DETAILS]: the comment's text. Ready and Failed show the preview's fields.
# (The backquotes in its strings are Markdown, not command substitutions.)
# shellcheck disable=SC2016
comment() {
  local headline=$1 details=${2:-} url
  url=$(field .status.url)
  printf '%s\n' "$(marker)"
  printf '### Preview `%s`: %s\n\n' "$name" "$headline"
  case "$headline" in
    Deploying)
      [ -n "$url" ] && printf 'It will be at %s once Ready.\n\n' "$url"
      ;;
    Deleted) ;;
    *)
      printf '| | |\n|---|---|\n'
      printf '| URL | %s |\n' "${url:-none yet}"
      printf '| Phase | %s |\n' "$(field .status.phase)"
      printf '| Image | `%s` |\n' "$(field .spec.image)"
      printf '| Expires | %s |\n' "$(field .status.expiresAt)"
      printf '| Namespace | `%s` |\n\n' "$namespace"
      ;;
  esac
  if [ -n "$details" ]; then
    printf '%s\n\n' "$details"
  fi
  local footer="Updated"
  [ -n "$commit" ] && footer+=" for commit ${commit:0:12}"
  [ -n "$run_url" ] && footer+=" by [this run]($run_url)"
  printf '<sub>%s. `vesperctl describe %s -n %s` shows more.</sub>\n' "$footer" "$name" "$namespace"
}

# vesperctl's message as a code block (a fence inside it is broken up, a long one cut).
# shellcheck disable=SC2016
quoted() {
  printf '```\n%s\n```' "$(printf '%s' "${1:0:3000}" | sed 's/```/`` `/g')"
}

# set_outputs URL PHASE EXPIRES: for the next steps (GitHub) and the environment (GitLab).
set_outputs() {
  if [ -n "${GITHUB_OUTPUT:-}" ]; then
    printf 'url=%s\nphase=%s\nexpires-at=%s\n' "$1" "$2" "$3" >>"$GITHUB_OUTPUT"
  fi
  if [ -n "${VESPER_DOTENV:-}" ]; then
    printf 'VESPER_URL=%s\nVESPER_PHASE=%s\nVESPER_EXPIRES_AT=%s\n' "$1" "$2" "$3" >>"$VESPER_DOTENV"
  fi
}

# --- up ---------------------------------------------------------------------------------------

up() {
  read_preview || die 1 "cannot read preview '$name' from the cluster (see vesperctl's message above)"
  find_comment
  # Say it is coming before the wait: reviewers see it at once, and a token that cannot write
  # comments fails the job before anything is deployed.
  write_comment "$(comment Deploying "Deploying \`$image\`...")"
  if [ "$state" = deleting ]; then
    # An expired preview is being deleted: let it go, then create it again.
    log "preview $namespace/$name is being deleted; waiting until it is gone to create it again"
    run_vesperctl wait "$name" --for deleted --timeout "$timeout"
    if [ "$vctl_rc" -ne 0 ]; then
      write_comment "$(comment Failed "$(quoted "$vctl_err")")"
      die "$vctl_rc" "preview $namespace/$name is still being deleted"
    fi
    state=absent
  fi
  local apply=(apply "$name" --image "$image" --wait --timeout "$timeout")
  if [ "$state" = absent ] && [ -n "${VESPER_TTL:-}" ]; then
    apply+=(--ttl "$VESPER_TTL")
  fi
  run_vesperctl "${apply[@]}"
  local rc=$vctl_rc reason=$vctl_err
  read_preview || true
  if [ "$rc" -eq 0 ]; then
    write_comment "$(comment Ready)"
    set_outputs "$(field .status.url)" "$(field .status.phase)" "$(field .status.expiresAt)"
    log "preview $namespace/$name is Ready at $(field .status.url)"
    return 0
  fi
  local why="\`vesperctl apply\` failed (exit code $rc):"
  [ "$rc" -eq 3 ] && why="Not Ready within $timeout (\`vesperctl apply\` exit code 3):"
  write_comment "$(comment Failed "$why"$'\n\n'"$(quoted "$reason")")"
  set_outputs "$(field .status.url)" Failed "$(field .status.expiresAt)"
  die "$rc" "preview $namespace/$name is not Ready (see vesperctl's message above)"
}

# --- down -------------------------------------------------------------------------------------

down() {
  read_preview || die 1 "cannot read preview '$name' from the cluster (see vesperctl's message above)"
  find_comment
  if [ "$state" = absent ]; then
    log "preview $namespace/$name does not exist (already deleted, or expired)"
  else
    run_vesperctl delete "$name" --wait --timeout "$timeout"
    if [ "$vctl_rc" -ne 0 ]; then
      read_preview || true
      if [ -n "$comment_id" ]; then
        write_comment "$(comment "Deletion failed" "$(quoted "$vctl_err")")"
      fi
      die "$vctl_rc" "preview $namespace/$name could not be deleted (see vesperctl's message above)"
    fi
  fi
  echo '{}' >"$work/preview.json"
  # Only a comment that exists is updated: a pull request that never had a preview gets none.
  if [ -n "$comment_id" ]; then
    write_comment "$(comment Deleted "The preview was deleted.")"
  fi
  set_outputs "" Deleted ""
}

"$mode"
