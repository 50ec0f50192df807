package ipmisim

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// DefaultUsername and DefaultPassword are the BMC credentials when Options leaves them empty.
	DefaultUsername = "admin"
	DefaultPassword = "secret"

	// offCommand is the line the chassis script logs for every power-off that reaches it.
	offCommand = "set power 0"

	startTimeout = 15 * time.Second
	stopTimeout  = 5 * time.Second
)

// Files in Options.Dir.
const (
	lanConfFile   = "lan.conf"
	emuFile       = "bmc.emu"
	scriptFile    = "chassis_control"
	powerFile     = "power"
	ignoreOffFile = "ignore-off"
	delayFile     = "delay"
	commandsFile  = "power-commands.log"
	logFile       = "ipmi_sim.log"
	stateDir      = "state"
)

// Options configure one simulated BMC.
type Options struct {
	// Dir is the state directory for this BMC (lan.conf, .emu, chassis script, power file). It
	// is created when missing. A new machine starts powered on; a reused Dir keeps its power.
	Dir string
	// Username and Password default to "admin" and "secret".
	Username, Password string
	// Host is the IPv4 address it listens on; default 127.0.0.1. A controller in a network
	// namespace reaches a BMC on the LAN's host address.
	Host string
	// Port is the UDP port on Host; 0 picks a free one.
	Port int
	// GUID is the system GUID the BMC sends for Get System GUID, its 16 bytes in the order
	// sent, as 32 hex digits; "" is all zeros, the placeholder of a BMC whose GUID was never
	// set, which the IPMI provider does not compare with the node's systemUUID: the test bed's
	// real machines all report their host's identity (its SMBIOS UUID, or without SMBIOS tables
	// its machine-id), so none of them could match a GUID of its own.
	GUID string
}

// BMC is one running ipmi_sim process.
type BMC struct {
	dir                string
	username, password string
	host               string
	port               int
	guid               string

	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has been waited for
	waited error

	stopOnce sync.Once
	stopErr  error
}

// Start writes the configuration into opts.Dir, starts ipmi_sim and waits until
// `ipmitool chassis power status` answers. ctx bounds the start only: the process runs until
// Stop.
func Start(ctx context.Context, opts Options) (*BMC, error) {
	opts, err := withDefaults(opts)
	if err != nil {
		return nil, err
	}
	pickPort := opts.Port == 0
	for attempt := 0; ; attempt++ {
		b, err := start(ctx, opts, pickPort)
		if err == nil || !pickPort || attempt == 2 || ctx.Err() != nil {
			return b, err
		}
	}
}

func start(ctx context.Context, opts Options, pickPort bool) (*BMC, error) {
	b := &BMC{dir: opts.Dir, username: opts.Username, password: opts.Password, host: opts.Host, port: opts.Port, guid: opts.GUID}
	if pickPort {
		port, err := freeUDPPort(opts.Host)
		if err != nil {
			return nil, err
		}
		b.port = port
	}
	if err := b.writeFiles(); err != nil {
		return nil, err
	}
	if err := b.launch(); err != nil {
		return nil, err
	}
	if err := b.waitReady(ctx); err != nil {
		_ = b.Stop()
		return nil, fmt.Errorf("starting ipmi_sim on %s: %w (log: %s)", b.Address(), err, b.logTail())
	}
	return b, nil
}

func withDefaults(opts Options) (Options, error) {
	if opts.Dir == "" {
		return opts, errors.New("ipmisim: Options.Dir is required")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return opts, fmt.Errorf("resolving %s: %w", opts.Dir, err)
	}
	opts.Dir = dir
	if opts.Username == "" {
		opts.Username = DefaultUsername
	}
	if opts.Password == "" {
		opts.Password = DefaultPassword
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if ip := net.ParseIP(opts.Host); ip == nil || ip.To4() == nil {
		return opts, fmt.Errorf("ipmisim: Host %q is not an IPv4 address", opts.Host)
	}
	for what, s := range map[string]string{"Dir": opts.Dir, "Username": opts.Username, "Password": opts.Password} {
		if strings.ContainsAny(s, " \t\n\"'\\") {
			return opts, fmt.Errorf("ipmisim: %s must not contain spaces, quotes or backslashes", what)
		}
	}
	if g, err := hex.DecodeString(opts.GUID); err != nil || len(g) != 16 && opts.GUID != "" {
		return opts, fmt.Errorf("ipmisim: GUID %q is not 32 hex digits", opts.GUID)
	}
	if len(opts.Username) > 16 || len(opts.Password) > 20 {
		return opts, errors.New("ipmisim: username is at most 16 bytes and password at most 20")
	}
	return opts, nil
}

// freeUDPPort asks the kernel for a free UDP port on host. Another process may take it before
// ipmi_sim binds it: Start then tries again with a new port.
func freeUDPPort(host string) (int, error) {
	conn, err := net.ListenPacket("udp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("picking a free UDP port: %w", err)
	}
	defer conn.Close()
	return conn.LocalAddr().(*net.UDPAddr).Port, nil
}

func (b *BMC) launch() error {
	log, err := os.OpenFile(b.path(logFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("opening ipmi_sim log: %w", err)
	}
	defer log.Close()
	cmd := exec.Command("ipmi_sim", "-c", b.path(lanConfFile), "-f", b.path(emuFile), "-s", b.path(stateDir), "-n")
	cmd.Dir = b.dir
	cmd.Stdout, cmd.Stderr = log, log
	// Own process group, so that Stop also ends a chassis script that is running; SIGKILLed by
	// the kernel should the test process die without calling Stop (Pdeathsig).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return fmt.Errorf("starting ipmi_sim (Debian package openipmi, see make deps): %w", err)
		}
		return fmt.Errorf("starting ipmi_sim: %w", err)
	}
	b.cmd = cmd
	b.exited = make(chan struct{})
	go func() {
		b.waited = cmd.Wait()
		close(b.exited)
	}()
	return nil
}

// waitReady polls `chassis power status` until it answers, the process exits or ctx ends.
func (b *BMC) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	for {
		if !b.bound() { // ipmitool waits a second before resending: don't ask before the bind
			if err := b.pause(ctx); err != nil {
				return err
			}
			continue
		}
		callCtx, callCancel := context.WithTimeout(ctx, 2*time.Second)
		out, err := b.ipmitool(callCtx, []string{"-N", "1", "-R", "1"}, "chassis", "power", "status")
		callCancel()
		if err == nil && strings.Contains(out, "Chassis Power is") {
			return nil
		}
		if perr := b.pause(ctx); perr != nil {
			return fmt.Errorf("%w (last answer: %v)", perr, err)
		}
	}
}

// pause waits a moment, failing when ipmi_sim has exited or ctx has ended.
func (b *BMC) pause(ctx context.Context) error {
	select {
	case <-b.exited:
		return fmt.Errorf("ipmi_sim exited: %v", b.waited)
	case <-ctx.Done():
		return fmt.Errorf("waiting for chassis power status to answer: %w", ctx.Err())
	case <-time.After(20 * time.Millisecond):
		return nil
	}
}

// bound says whether a socket is bound to host:port, from /proc/net/udp (addresses in
// little-endian hex).
func (b *BMC) bound() bool {
	data, err := os.ReadFile("/proc/net/udp")
	if err != nil {
		return true // not Linux: let ipmitool find out
	}
	ip := net.ParseIP(b.host).To4()
	return strings.Contains(string(data), fmt.Sprintf(" %02X%02X%02X%02X:%04X ", ip[3], ip[2], ip[1], ip[0], b.port))
}

// Address is "<host>:<port>".
func (b *BMC) Address() string { return net.JoinHostPort(b.host, strconv.Itoa(b.port)) }

// Port is the BMC's UDP port.
func (b *BMC) Port() int { return b.port }

// Username is the BMC's administrator name.
func (b *BMC) Username() string { return b.username }

// Password is the BMC's administrator password.
func (b *BMC) Password() string { return b.password }

// Dir is the BMC's state directory.
func (b *BMC) Dir() string { return b.dir }

// IPMITool runs ipmitool against this BMC over lanplus with cipher suite 3, the password in the
// environment, and returns its combined output: IPMITool(ctx, "chassis", "power", "off").
func (b *BMC) IPMITool(ctx context.Context, args ...string) (string, error) {
	return b.ipmitool(ctx, nil, args...)
}

func (b *BMC) ipmitool(ctx context.Context, extra []string, args ...string) (string, error) {
	argv := []string{"-I", "lanplus", "-H", b.host, "-p", strconv.Itoa(b.port), "-U", b.username, "-E", "-C", "3"}
	argv = append(append(argv, extra...), args...)
	cmd := exec.CommandContext(ctx, "ipmitool", argv...)
	cmd.Env = []string{"IPMITOOL_PASSWORD=" + b.password}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("running ipmitool %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// PoweredOn reads the machine's power from the power file: what a simulated node polls.
func (b *BMC) PoweredOn() (bool, error) {
	data, err := os.ReadFile(b.path(powerFile))
	if err != nil {
		return false, fmt.Errorf("reading power state: %w", err)
	}
	switch strings.TrimSpace(string(data)) {
	case "1":
		return true, nil
	case "0":
		return false, nil
	}
	return false, fmt.Errorf("reading power state: unexpected content %q", data)
}

// SetPower is the physical world: pull the plug (false) or press the power button (true),
// bypassing IPMI. It counts as no IPMI command.
func (b *BMC) SetPower(on bool) error {
	v := "0"
	if on {
		v = "1"
	}
	return writeFileAtomic(b.path(powerFile), []byte(v+"\n"), 0o644)
}

// SetIgnoreOff makes a lying BMC (true): "chassis power off" is accepted and answered as
// usual, the command is counted, but the power stays on.
func (b *BMC) SetIgnoreOff(ignore bool) error {
	if ignore {
		return writeFileAtomic(b.path(ignoreOffFile), []byte("1\n"), 0o644)
	}
	if err := os.Remove(b.path(ignoreOffFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("clearing ignore-off: %w", err)
	}
	return nil
}

// SetDelay makes a slow BMC: every chassis command (power status included) is carried out
// and answered only after d; 0 makes it prompt again.
func (b *BMC) SetDelay(d time.Duration) error {
	if d > 0 {
		return writeFileAtomic(b.path(delayFile), []byte(fmt.Sprintf("%.3f\n", d.Seconds())), 0o644)
	}
	if err := os.Remove(b.path(delayFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("clearing the delay: %w", err)
	}
	return nil
}

// OffCommands counts the power-off commands that reached the chassis, including those a lying
// BMC ignored.
func (b *BMC) OffCommands() (int, error) {
	f, err := os.Open(b.path(commandsFile))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading chassis commands: %w", err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == offCommand {
			n++
		}
	}
	return n, sc.Err()
}

// Stop kills ipmi_sim's process group (ipmi_sim and any chassis script it is running) and
// waits for it. It is safe to call more than once.
func (b *BMC) Stop() error {
	b.stopOnce.Do(func() { b.stopErr = b.stop() })
	return b.stopErr
}

func (b *BMC) stop() error {
	if b.cmd == nil {
		return nil
	}
	select {
	case <-b.exited: // died on its own: its group id may no longer be ours
		return nil
	default:
	}
	// SIGKILL while ipmi_sim is not yet reaped, so the group id is surely still ours. A
	// simulator has nothing to save.
	pgid := b.cmd.Process.Pid
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing ipmi_sim process group %d: %w", pgid, err)
	}
	select {
	case <-b.exited:
		return nil
	case <-time.After(stopTimeout):
		return fmt.Errorf("ipmi_sim %d did not exit %s after SIGKILL", pgid, stopTimeout)
	}
}

func (b *BMC) path(name string) string { return filepath.Join(b.dir, name) }

// logTail is the end of ipmi_sim's log, for start errors.
func (b *BMC) logTail() string {
	data, _ := os.ReadFile(b.path(logFile))
	s := strings.TrimSpace(string(data))
	if len(s) > 500 {
		s = s[len(s)-500:]
	}
	return s
}
