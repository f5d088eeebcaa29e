#!/bin/sh
# An emulated cluster on one machine: K "nodes" as Linux network
# namespaces, each joined by a veth pair to a bridge (in a namespace of its
# own, so the machine's own network is never touched), each node's link
# shaped with tc (a token bucket, tbf, in both directions: the node's
# egress and the bridge port's egress towards it). Open MPI runs across
# them: its TCP transport between nodes, shared memory inside one. No ssh:
# mpirun's rsh agent is a small script that runs `ip netns exec`.
#
#   scripts/cluster.sh up [--nodes K] [--rate RATE] [--queue Q] [--delay D]
#   scripts/cluster.sh run [--ranks-per-node R] [--] PROGRAM ARGS...
#   scripts/cluster.sh down
#   scripts/cluster.sh status
#
# up      K nodes (2), each link at RATE (tc's units: 400mbit, 1gbit; the
#         default profile is ZS_CLUSTER_RATE or 2gbit (250 MB/s), about 1/8 to
#         1/12 of the 2-3.5 GB/s bus bandwidth the engine's ring reaches
#         through shared memory between two ranks on the machine this was
#         written on, see docs/cluster.md), and a one-way delay D (tc's
#         units, 1ms) only where the kernel has the netem qdisc; without it
#         --delay is refused with one line. Q (100ms) is the longest a
#         packet waits in a link's queue (tbf's latency): the queue holds Q
#         of traffic at RATE, and packets beyond it are dropped. Nothing
#         changes outside the namespaces it makes but /etc/netns/<node>/hosts
#         (read by `ip netns exec`) and the state folder. Exits 77 when
#         namespaces cannot be made here (not root, no iproute2, no
#         permission).
# run     mpirun with R ranks per node (1) on all K nodes, ranks in node
#         order (ranks 0..R-1 on the first node, ...); mpirun itself runs
#         in the first node. Its exit status is mpirun's.
# down    removes everything `up` made (it keeps a list as it goes), also
#         after a failed `up` or `run`, ending the processes left inside
#         the namespaces first. Safe to repeat.
#
# Needs root and iproute2. State: ZS_CLUSTER_STATE (/run/zerosim-cluster);
# names: ZS_CLUSTER_PREFIX (zs): namespaces zs-n0 ... and zs-sw.
set -u
STATE=${ZS_CLUSTER_STATE:-/run/zerosim-cluster}
P=${ZS_CLUSTER_PREFIX:-zs}
NET=${ZS_CLUSTER_NET:-10.77.0}
me=scripts/cluster.sh

die() { echo "$me: $*" >&2; exit 1; }
made() { echo "$*" >> "$STATE/made"; }

usage() {
    sed -n '/^#   scripts/p' "$0" | sed 's/^# *//'
    exit 2
}

cmd_down() {
    if [ ! -f "$STATE/made" ]; then
        [ -d "$STATE" ] && rm -rf "$STATE"
        echo "$me: nothing to remove (no cluster is up)"
        return 0
    fi
    fail=0
    # in reverse order of making
    # (a file, not a pipe: the loop's fail=1 must reach this shell)
    sed -n '1!G;h;$p' "$STATE/made" >"$STATE/unmake"
    while read -r kind what; do
        case $kind in
            netns)
                pids=$(ip netns pids "$what" 2>/dev/null)
                # shellcheck disable=SC2086 # one word per process id
                [ -n "$pids" ] && kill $pids 2>/dev/null
                # shellcheck disable=SC2046 # one word per process id
                [ -n "$pids" ] && sleep 0.5 && kill -9 $(ip netns pids "$what" 2>/dev/null) 2>/dev/null
                ip netns del "$what" 2>/dev/null || [ ! -e "/run/netns/$what" ] ||
                    { echo "$me: could not remove namespace $what" >&2; fail=1; } ;;
            file) rm -f "$what" ;;
            dir) rmdir "$what" 2>/dev/null ;;
        esac
    done <"$STATE/unmake"
    rm -rf "$STATE"
    left=$(ip netns list 2>/dev/null | grep -c "^$P-\(n[0-9]*\|sw\)\b")
    [ "$left" -eq 0 ] || die "namespaces left behind: $(ip netns list | grep "^$P-" | tr '\n' ' ')"
    echo "$me: down"
    return $fail
}

cmd_up() {
    K=2 RATE=${ZS_CLUSTER_RATE:-2gbit} DELAY='' QUEUE=100ms
    while [ $# -gt 0 ]; do
        case $1 in
            --nodes) K=$2; shift 2 ;;
            --rate) RATE=$2; shift 2 ;;
            --delay) DELAY=$2; shift 2 ;;
            --queue) QUEUE=$2; shift 2 ;;
            *) die "up: unknown option $1 (--nodes K, --rate RATE, --queue Q, --delay D)" ;;
        esac
    done
    case $K in ''|*[!0-9]*) die "up: --nodes needs a number from 1 to 200, got \"$K\"" ;; esac
    if [ "$K" -lt 1 ] || [ "$K" -gt 200 ]; then die "up: --nodes needs a number from 1 to 200, got $K"; fi
    echo "$QUEUE" | grep -Eq '^[0-9]+([.][0-9]+)?(ms|us)$' ||
        die "up: --queue must be a time in ms or us (20ms), got \"$QUEUE\""
    [ -e "$STATE/made" ] && die "a cluster is already up ($STATE): run $me down first"
    if [ "$(id -u)" != 0 ]; then echo "$me: needs root to make network namespaces" >&2; exit 77; fi
    for t in ip tc unshare mpirun; do
        command -v $t > /dev/null || { echo "$me: $t not found (iproute2, util-linux, Open MPI)" >&2; exit 77; }
    done
    # the nodes are started through Open MPI's rsh agent and MCA options;
    # MPICH's mpiexec (hydra) takes other ones, not written here yet
    case $(mpirun --version 2>&1) in
        *"Open MPI"*|*OpenRTE*) ;;
        *) echo "$me: the emulated cluster needs Open MPI's mpirun (this one is not: $(mpirun --version 2>&1 | head -n 1))" >&2
           exit 77 ;;
    esac
    mkdir -p "$STATE" || die "cannot create $STATE"
    : > "$STATE/made"
    if ! ip netns add "$P-sw" 2> "$STATE/err"; then
        echo "$me: cannot make network namespaces here: $(cat "$STATE/err")" >&2
        cmd_down > /dev/null
        exit 77
    fi
    made netns "$P-sw"
    # anything failing from here on: take down what was made
    if ! up_nodes; then
        cmd_down > /dev/null 2>&1
        exit 1
    fi
    echo "$K" > "$STATE/nodes"
    echo "$RATE" > "$STATE/rate"
    echo "$me: up: $K nodes ($P-n0 .. $P-n$((K - 1)), $NET.1 ..), each link $RATE both ways, queue $QUEUE${DELAY:+, delay $DELAY}"
}

# tc on one end: the rate (and the delay, netem, where there is one)
shape() { # netns dev
    burst=$(rate_burst "$RATE") || return 1
    if [ -n "$DELAY" ]; then
        tc -n "$1" qdisc add dev "$2" root handle 1: netem delay "$DELAY" 2> "$STATE/err" || {
            echo "$me: --delay $DELAY needs the netem qdisc, which this kernel does not have ($(cat "$STATE/err")): bring the cluster up without --delay" >&2
            return 1; }
        tc -n "$1" qdisc add dev "$2" parent 1:1 handle 10: tbf rate "$RATE" burst "$burst" latency "$QUEUE"
    else
        tc -n "$1" qdisc add dev "$2" root tbf rate "$RATE" burst "$burst" latency "$QUEUE"
    fi
}

# a token bucket of at least 4 ms at the rate (and 64 KB)
rate_burst() {
    bits=$(echo "$1" | awk '
        /^[0-9.]+(bit|kbit|mbit|gbit)$/ { n = $0 + 0; u = $0; sub(/^[0-9.]+/, "", u)
            m = u == "bit" ? 1 : u == "kbit" ? 1e3 : u == "mbit" ? 1e6 : 1e9; printf "%.0f", n * m; exit }
        { exit 1 }') || { echo "$me: up: --rate must be a number with bit, kbit, mbit or gbit (400mbit), got \"$1\"" >&2; return 1; }
    [ "$bits" -gt 0 ] || { echo "$me: up: --rate must be above 0" >&2; return 1; }
    echo "$bits" | awk '{ b = $1 / 8 * 0.004; if (b < 65536) b = 65536; printf "%.0f\n", b }'
}

up_nodes() {
    rate_burst "$RATE" > /dev/null || return 1
    ip -n "$P-sw" link add br0 type bridge || return 1
    ip -n "$P-sw" link set br0 up || return 1
    hosts="127.0.0.1 localhost"
    i=0
    while [ $i -lt "$K" ]; do
        hosts="$hosts
$NET.$((i + 1)) $P-n$i"
        i=$((i + 1))
    done
    i=0
    while [ $i -lt "$K" ]; do
        n=$P-n$i
        ip netns add "$n" || return 1
        made netns "$n"
        if [ ! -d /etc/netns ]; then mkdir /etc/netns && made dir /etc/netns; fi
        if [ ! -d "/etc/netns/$n" ]; then mkdir "/etc/netns/$n" && made dir "/etc/netns/$n"; fi
        printf '%s\n' "$hosts" > "/etc/netns/$n/hosts" && made file "/etc/netns/$n/hosts" || return 1
        # the veth pair is made inside the switch namespace: never in the machine's own
        ip -n "$P-sw" link add "p$i" type veth peer name nic0 netns "$n" || return 1
        ip -n "$P-sw" link set "p$i" master br0 up || return 1
        ip -n "$n" link set lo up || return 1
        ip -n "$n" addr add "$NET.$((i + 1))/24" dev nic0 || return 1
        ip -n "$n" link set nic0 up || return 1
        shape "$n" nic0 || return 1
        shape "$P-sw" "p$i" || return 1
        i=$((i + 1))
    done
    # the bridge forwards once its ports are up: wait until node 0 reaches the
    # last (a TCP connection to a closed port is refused: it got there)
    command -v bash > /dev/null || return 0
    i=0
    while ! ip netns exec "$P-n0" bash -c "echo > /dev/tcp/$NET.$K/9" 2>&1 | grep -q refused; do
        i=$((i + 1))
        [ $i -lt 20 ] || { echo "$me: up: the nodes cannot reach each other" >&2; return 1; }
        sleep 0.5
    done
    return 0
}

cmd_run() {
    [ -f "$STATE/nodes" ] || die "run: no cluster is up: run $me up first"
    R=1
    while [ $# -gt 0 ]; do
        case $1 in
            --ranks-per-node) R=$2; shift 2 ;;
            --) shift; break ;;
            -*) die "run: unknown option $1 (--ranks-per-node R, then the program)" ;;
            *) break ;;
        esac
    done
    case $R in ''|*[!0-9]*|0) die "run: --ranks-per-node needs a number of at least 1, got \"$R\"" ;; esac
    [ $# -gt 0 ] || die "run: which program? ($me run [--ranks-per-node R] PROGRAM ARGS...)"
    K=$(cat "$STATE/nodes")
    : > "$STATE/hostfile"
    i=0
    while [ $i -lt "$K" ]; do
        echo "$P-n$i slots=$R" >> "$STATE/hostfile"
        i=$((i + 1))
    done
    # Open MPI's rsh agent: "AGENT [ssh options] HOST COMMAND...": the
    # command in the host's namespace, under the host's own name (its own
    # UTS namespace), so Open MPI sees K distinct nodes
    cat > "$STATE/agent.sh" <<'EOF'
#!/bin/sh
while [ $# -gt 0 ]; do case $1 in -*) shift ;; *) break ;; esac; done
host=$1
shift
exec ip netns exec "$host" unshare --uts /bin/sh -c "hostname $host && $*"
EOF
    chmod +x "$STATE/agent.sh"
    np=$((K * R))
    # mpirun in the first node; OMPI's variables for root and oversubscription
    # shellcheck disable=SC2016,SC2086 # the inner shell expands $0 and $@;
    # ZS_CLUSTER_MPI_ARGS is mpirun's options, split into words on purpose
    ip netns exec "$P-n0" unshare --uts /bin/sh -c 'hostname "$0" && exec "$@"' "$P-n0" \
        env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1 \
        mpirun -q -np "$np" --hostfile "$STATE/hostfile" --oversubscribe --bind-to none \
        --map-by slot \
        --mca plm_rsh_agent "$STATE/agent.sh" --mca plm_rsh_no_tree_spawn 1 \
        --mca btl self,vader,tcp --mca btl_tcp_if_include "$NET.0/24" \
        --mca oob_tcp_if_include "$NET.0/24" \
        -x OPENBLAS_NUM_THREADS -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM \
        ${ZS_CLUSTER_MPI_ARGS:-} "$@"
}

cmd_status() {
    [ -f "$STATE/nodes" ] || { echo "$me: no cluster is up"; return 0; }
    K=$(cat "$STATE/nodes")
    echo "$me: $K nodes, each link $(cat "$STATE/rate") both ways"
    i=0
    while [ $i -lt "$K" ]; do
        echo "$P-n$i: $(ip -n "$P-n$i" -br addr show nic0 | awk '{ print $3 }')  $(tc -n "$P-n$i" qdisc show dev nic0 | head -1)"
        i=$((i + 1))
    done
}

[ $# -ge 1 ] || usage
c=$1
shift
case $c in
    up) cmd_up "$@" ;;
    run) cmd_run "$@" ;;
    down) cmd_down ;;
    status) cmd_status ;;
    *) usage ;;
esac
