package ipmisim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// chassisScript is ipmi_sim's chassis_control, run through /bin/sh (so that a script just
// written can never be "text file busy") as `chassis_control 0x20 get power` (it must print
// "power:1" or "power:0") and `chassis_control 0x20 set power 0|1`. Every set is logged; a
// power-off is ignored while the ignore-off file exists; while the delay file exists, every
// call first sleeps the seconds it holds (ipmi_sim waits for the script, so the BMC answers
// late). The power file is replaced atomically so readers never see it empty.
const chassisScript = `#!/bin/sh
# Written by palisade's ipmisim: the chassis of one simulated machine.
dir='{{DIR}}'
op="$2"
shift 2
if [ -e "$dir/delay" ]; then sleep "$(cat "$dir/delay")"; fi
case "$op" in
get)
	for item in "$@"; do
		if [ "$item" = power ]; then
			if [ "$(cat "$dir/power" 2>/dev/null)" = 1 ]; then echo "power:1"; else echo "power:0"; fi
		fi
	done
	;;
set)
	echo "set $*" >> "$dir/power-commands.log"
	if [ "$1" = power ]; then
		if [ "$2" = 0 ] && [ -e "$dir/ignore-off" ]; then exit 0; fi
		echo "$2" > "$dir/power.$$" && mv -f "$dir/power.$$" "$dir/power"
	fi
	;;
esac
exit 0
`

const lanConf = `name "palisade"
set_working_mc 0x20
  startlan 1
    addr %s %d
    priv_limit admin
    allowed_auths_callback none md2 md5 straight
    allowed_auths_user none md2 md5 straight
    allowed_auths_operator none md2 md5 straight
    allowed_auths_admin none md2 md5 straight
    guid %s
  endlan
  chassis_control "/bin/sh %s 0x20"
  user 2 true "%s" "%s" admin 10 none md2 md5 straight
`

const emu = `mc_setbmc 0x20
mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr
mc_enable 0x20
`

// GUID is the system GUID the BMC sends, its bytes in the order sent, as 32 hex digits
// (Options.GUID).
func (b *BMC) GUID() string {
	if b.guid != "" {
		return b.guid
	}
	return strings.Repeat("0", 32)
}

// writeFiles writes lan.conf, the .emu file and the chassis script, and a power file saying
// "on" unless one is already there.
func (b *BMC) writeFiles() error {
	if err := os.MkdirAll(b.path(stateDir), 0o755); err != nil {
		return fmt.Errorf("creating BMC state directory: %w", err)
	}
	files := []struct {
		name string
		data string
		mode os.FileMode
	}{
		{scriptFile, strings.ReplaceAll(chassisScript, "{{DIR}}", b.dir), 0o755},
		{lanConfFile, fmt.Sprintf(lanConf, b.host, b.port, b.GUID(), b.path(scriptFile), b.username, b.password), 0o600},
		{emuFile, emu, 0o644},
	}
	for _, f := range files {
		if err := writeFileAtomic(b.path(f.name), []byte(f.data), f.mode); err != nil {
			return err
		}
	}
	if _, err := os.Stat(b.path(powerFile)); errors.Is(err, os.ErrNotExist) {
		return b.SetPower(true)
	}
	return nil
}

// writeFileAtomic replaces name with data through a rename in the same directory.
func writeFileAtomic(name string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", name, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", name, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	if err := os.Rename(tmp.Name(), name); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return nil
}
