# KubeVirt's mutating-webhook defaults for an example VMI, as docs/vmi.md lists
# them (pkg/defaults: SetDefaultVirtualMachineInstance, SetAmd64Defaults,
# hyperv.go; the API's defaulters), so that KubeVirt's launcher gets the VMI a
# cluster would hand it. Used by scripts/kubevirt-reference.sh; $uuid is the
# firmware UUID KubeVirt's VM controller derives from the name
# (CalculateLegacyUUID), computed by the script.
#
# Left out on purpose: the defaults that depend on a cluster's configuration
# and that this launcher does not apply itself (LiveUpdate's maxSockets and
# maxGuest, the PCI topology annotation, the non-root marker): with them the
# two converters would not be given the same VMI. tests/kubevirt_golden.rs
# checks that this launcher converts the result exactly as the bare example.

# (`//=` would also replace an explicit false.)
def default($field; $value): if has($field) and .[$field] != null then . else .[$field] = $value end;
def enabled_default: if type == "object" then default("enabled"; true) else . end;

.spec.terminationGracePeriodSeconds //= 30
# SetDefaults_VirtualMachineInstance: features and firmware are never absent.
| .spec.domain.features //= {}
| .spec.domain.firmware.uuid //= $uuid
| .spec.architecture //= "amd64"
| .spec.domain.machine.type //= "q35"
| .spec.domain.cpu.model //= "host-model"
# SetDefaultGuestCPUTopology: only when no topology field is given.
| if ((.spec.domain.cpu.sockets // 0) == 0 and (.spec.domain.cpu.cores // 0) == 0
      and (.spec.domain.cpu.threads // 0) == 0) then
    .spec.domain.cpu += {
      sockets: ((.spec.domain.resources.limits.cpu // .spec.domain.resources.requests.cpu // "1")
                | tostring | tonumber | ceil),
      cores: 1, threads: 1 }
  else . end
# setGuestMemory
| if .spec.domain.memory.guest == null then
    (.spec.domain.resources.requests.memory // .spec.domain.resources.limits.memory
     // .spec.domain.memory.hugepages.pageSize) as $guest
    | if $guest == null then . else .spec.domain.memory.guest = $guest end
  else . end
# SetDefaultNetworkInterface: the pod network, masquerade.
| if (.spec.domain.devices.interfaces // []) == [] and (.spec.networks // []) == []
     and .spec.domain.devices.autoattachPodInterface != false then
    .spec.domain.devices.interfaces = [{name: "default", masquerade: {}}]
    | .spec.networks = [{name: "default", pod: {}}]
  else . end
# util.SetDefaultVolumeDisk
| ([.spec.domain.devices.disks[]?.name]) as $named
| .spec.domain.devices.disks = ((.spec.domain.devices.disks // [])
    + [.spec.volumes[]? | select(.name as $n | $named | index($n) | not) | {name}])
# SetDefaults_DiskDevice, setDefaultAmd64DisksBus, SetDefaults_CDRomTarget
| .spec.domain.devices.disks |= map(
    if (has("disk") or has("lun") or has("cdrom")) | not then .disk = {} else . end
    | if has("disk") then .disk.bus //= "sata" else . end
    | if has("lun") then .lun.bus //= "sata" else . end
    | if has("cdrom") then .cdrom.bus //= "sata" | (.cdrom |= default("readonly"; true))
        | .cdrom.tray //= "closed" else . end)
| if (.spec.domain.devices.disks | length) == 0 then del(.spec.domain.devices.disks) else . end
# SetAmd64Watchdog
| if .spec.domain.devices.watchdog != null then
    .spec.domain.devices.watchdog.i6300esb.action //= "reset" else . end
# setDefaults_Input
| if .spec.domain.devices.inputs != null then
    .spec.domain.devices.inputs |= map(.bus //= "usb" | .type //= "tablet") else . end
# SetDefaults_FeatureState, SetDefaults_FeatureSpinlocks, hyperv.go
| if .spec.domain.features != null then
    .spec.domain.features |= (
      with_entries(if .key == "kvm" or .key == "hyperv" then . else .value |= enabled_default end)
      | if .hyperv != null then
          .hyperv |= (map_values(enabled_default)
            | if .spinlocks != null and .spinlocks.enabled then .spinlocks.spinlocks //= 4096 else . end
            | if (.synic.enabled // false) or (.ipi.enabled // false) or (.tlbflush.enabled // false)
              then .vpindex |= ((. // {}) | default("enabled"; true)) else . end
            | if (.synictimer.enabled // false) then .synic |= ((. // {}) | default("enabled"; true)) else . end
            | if (.evmcs.enabled // false) then .vapic |= ((. // {}) | default("enabled"; true)) else . end)
        else . end)
  else . end
# setGuestMemoryStatus, setCurrentCPUTopologyStatus
| if .spec.domain.memory.guest != null then
    .status.memory = {guestAtBoot: .spec.domain.memory.guest, guestCurrent: .spec.domain.memory.guest,
                      guestRequested: .spec.domain.memory.guest}
  else . end
| if .spec.domain.cpu != null then
    .status.currentCPUTopology = (.spec.domain.cpu | {sockets, cores, threads} | with_entries(select(.value != null)))
  else . end
