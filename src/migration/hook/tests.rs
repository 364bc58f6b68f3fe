use super::*;

/// What libvirt hands the hook: the source pod's domain, laid out
/// differently (another ephemeral disk directory) and pinned to the
/// source node's CPUs.
const INCOMING: &str = "<domain type='kvm'>
  <name>e2e_vmi</name>
  <vcpu placement='static'>2</vcpu>
  <cputune>
    <vcpupin vcpu='0' cpuset='5'/>
    <vcpupin vcpu='1' cpuset='6'/>
  </cputune>
  <numatune>
    <memory mode='strict' nodeset='1'/>
  </numatune>
  <cpu mode='host-model' check='partial'>
    <topology sockets='1' dies='1' cores='2' threads='1'/>
  </cpu>
  <devices>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source file='/var/run/old-layout/empty-disks/scratch.qcow2' index='2'/>
      <backingStore/>
      <target dev='vdb' bus='virtio'/>
      <alias name='ua-scratch'/>
    </disk>
    <disk type='file' device='disk'>
      <source file='/var/run/old-layout/cloud-init-data/e2e/vmi/noCloud.iso'/>
      <target dev='vdc' bus='virtio'/>
    </disk>
    <disk type='file' device='disk'>
      <source file='/var/run/kubevirt/hotplug-disks/hp.img'/>
      <target dev='sda' bus='scsi'/>
      <alias name='ua-hotplugged'/>
    </disk>
    <disk type='block' device='disk'>
      <source dev='/dev/blockpvc'/>
      <target dev='vdd' bus='virtio'/>
      <alias name='ua-blockpvc'/>
    </disk>
  </devices>
</domain>
";

/// This pod's domain for the VMI, as the converter writes it.
fn ours(dedicated: bool) -> TargetFit {
    let xml = "<domain type='kvm'><name>e2e_vmi</name><memory>1</memory>
      <vcpu placement='static'>2</vcpu>
      <cputune><vcpupin vcpu='0' cpuset='2'/><vcpupin vcpu='1' cpuset='3'/><emulatorpin cpuset='2'/></cputune>
      <os><type>hvm</type></os>
      <cpu mode='host-model'><topology sockets='1' cores='2' threads='1'/></cpu>
      <devices>
        <disk type='file' device='disk'>
          <source file='/var/run/libvirt/empty-disks/scratch.qcow2'/>
          <target dev='vdb' bus='virtio'/><alias name='ua-scratch'/>
        </disk>
        <disk type='file' device='disk'>
          <source file='/var/run/kubevirt-ephemeral-disks/cloud-init-data/e2e/vmi/noCloud.iso'/>
          <target dev='vdc' bus='virtio'/>
        </disk>
        <disk type='block' device='disk'>
          <source dev='/dev/blockpvc'/>
          <target dev='vdd' bus='virtio'/><alias name='ua-blockpvc'/>
        </disk>
      </devices></domain>";
    TargetFit::of(&Domain::from_xml(xml).unwrap(), dedicated).unwrap()
}

#[test]
fn disks_get_this_pods_files_and_nothing_else_changes() {
    let (out, changes) = fit_incoming(INCOMING, &ours(false)).unwrap();
    let want = INCOMING
        .replace(
            "/var/run/old-layout/empty-disks/scratch.qcow2",
            "/var/run/libvirt/empty-disks/scratch.qcow2",
        )
        .replace(
            "/var/run/old-layout/cloud-init-data",
            "/var/run/kubevirt-ephemeral-disks/cloud-init-data",
        );
    // Byte for byte: the source's pinning stays without dedicated CPUs, a
    // disk this pod's domain does not have (hotplugged) and a block disk
    // are left alone.
    assert_eq!(out, want);
    assert_eq!(
        changes,
        [
            "disk ua-scratch: /var/run/old-layout/empty-disks/scratch.qcow2 -> /var/run/libvirt/empty-disks/scratch.qcow2",
            "disk vdc: /var/run/old-layout/cloud-init-data/e2e/vmi/noCloud.iso -> /var/run/kubevirt-ephemeral-disks/cloud-init-data/e2e/vmi/noCloud.iso",
        ]
    );
    // Fitted again: nothing left to change.
    let (again, changes) = fit_incoming(&out, &ours(false)).unwrap();
    assert_eq!((again.as_str(), changes.len()), (out.as_str(), 0));
}

#[test]
fn dedicated_cpus_get_this_pods_pinning() {
    let (out, changes) = fit_incoming(INCOMING, &ours(true)).unwrap();
    let domain = Domain::from_xml(&out).unwrap();
    let tune = domain.cputune.unwrap();
    let pins: Vec<(u32, &str)> = tune
        .vcpupin
        .iter()
        .map(|p| (p.vcpu, p.cpuset.as_str()))
        .collect();
    assert_eq!(pins, [(0, "2"), (1, "3")]);
    assert_eq!(tune.emulatorpin.unwrap().cpuset, "2");
    // The source's NUMA tuning is not this pod's: gone.
    assert!(domain.numatune.is_none(), "{out}");
    assert!(!out.contains("nodeset"), "{out}");
    // The topology is this pod's (libvirt's `dies` the source added is
    // dropped), the CPU model is the source's.
    assert!(
        out.contains("<cpu mode='host-model' check='partial'>"),
        "{out}"
    );
    let topology = domain.cpu.unwrap().topology.unwrap();
    assert_eq!((topology.sockets, topology.dies), (1, None));
    assert_eq!(domain.vcpu.unwrap().count, 2);
    assert!(
        changes.iter().any(|c| c.starts_with("<cputune>")),
        "{changes:?}"
    );
    assert!(
        changes.iter().any(|c| c.starts_with("<numatune>")),
        "{changes:?}"
    );
    // The disks are fitted as well.
    assert!(out.contains("/var/run/libvirt/empty-disks/scratch.qcow2"));
}

#[test]
fn missing_pinning_is_added_where_libvirt_reads_it() {
    let incoming = "<domain type='kvm'><name>x</name><vcpu>2</vcpu><cpu mode='host-model'/><devices/></domain>";
    let (out, _) = fit_incoming(incoming, &ours(true)).unwrap();
    let domain = Domain::from_xml(&out).unwrap();
    assert_eq!(domain.cputune.unwrap().vcpupin.len(), 2, "{out}");
    assert_eq!(domain.cpu.unwrap().topology.unwrap().cores, 2, "{out}");
}

#[test]
fn what_is_not_a_domain_is_refused() {
    for bad in [
        "",
        "<domain><name>x</name>",
        "<network><name>x</name></network>",
        "<domain><devices><disk><source file=a/></disk></devices></domain>",
        "<domain></devices></domain>",
        "not xml",
    ] {
        assert!(fit_incoming(bad, &ours(true)).is_err(), "{bad:?}");
    }
}

#[test]
fn a_document_is_complete_at_the_end_of_its_root() {
    assert!(document_complete(INCOMING.as_bytes()));
    assert!(document_complete(b"<?xml version='1.0'?>\n<domain/>\n"));
    for cut in [10, 200, INCOMING.len() - 3] {
        assert!(!document_complete(&INCOMING.as_bytes()[..cut]), "{cut}");
    }
    // A multi-byte character cut in two.
    assert!(!document_complete(
        "<domain>é".as_bytes().split_last().unwrap().1
    ));
}

/// Client and server over a real socket, the client holding its end open
/// as KubeVirt's does: the server answers at the end of the root element.
#[test]
fn the_server_answers_one_connection_and_goes() {
    let dir = std::env::temp_dir().join(format!("vl-hook-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let socket = dir.join(SOCKET_NAME);
    let (fatal, _fatal_rx) = crossbeam_channel::unbounded();
    let server = HookServer::start(socket.clone(), TargetFit::default(), &fatal).unwrap();
    server.update(ours(false));
    assert!(server.is_listening());
    // As KubeVirt's client: write, do not close, read to the end.
    let mut conn = UnixStream::connect(&socket).unwrap();
    conn.write_all(INCOMING.as_bytes()).unwrap();
    let mut reply = String::new();
    conn.read_to_string(&mut reply).unwrap();
    assert!(reply.contains("/var/run/libvirt/empty-disks/scratch.qcow2"));
    // One connection only; the socket is gone.
    for _ in 0..100 {
        if !server.is_listening() && !socket.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!server.is_listening());
    assert!(!socket.exists());
    assert!(UnixStream::connect(&socket).is_err());
    drop(server);

    // A launcher that ends before the domain arrives removes the socket.
    let server = HookServer::start(socket.clone(), ours(false), &fatal).unwrap();
    assert!(socket.exists());
    drop(server);
    assert!(!socket.exists());

    // Our client against a server that fails (closes without a reply):
    // the hook fails, and so libvirt's incoming migration.
    let listener = UnixListener::bind(&socket).unwrap();
    let closer = std::thread::spawn(move || drop(listener.accept()));
    let args: Vec<String> = ["qemu", "e2e_vmi", "migrate", "begin", "-"]
        .map(String::from)
        .to_vec();
    let mut out = Vec::new();
    let marker = dir.join("meta/migrated");
    let failed = run_client(
        &args,
        &mut "<domain/>".as_bytes(),
        &mut out,
        &socket,
        &marker,
    );
    closer.join().unwrap();
    assert!(failed.is_err(), "{failed:?}");
    fs::remove_file(&socket).unwrap();
    // No server at all: fails too.
    assert!(
        run_client(
            &args,
            &mut "<domain/>".as_bytes(),
            &mut out,
            &socket,
            &marker
        )
        .is_err()
    );
    assert!(out.is_empty());
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn the_client_marks_a_migrated_source_only_with_backend_storage() {
    let dir = std::env::temp_dir().join(format!("vl-hook-marker-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let marker = dir.join("meta/migrated");
    let socket = dir.join("none");
    let release: Vec<String> = ["qemu", "d", "release", "end", "migrated"]
        .map(String::from)
        .to_vec();
    let mut out = Vec::new();
    // No backend storage: nothing to mark, and no failure.
    assert_eq!(
        run_client(
            &release,
            &mut "<domain/>".as_bytes(),
            &mut out,
            &socket,
            &marker
        ),
        Ok(())
    );
    assert!(!marker.exists());
    fs::create_dir_all(marker.parent().unwrap()).unwrap();
    assert_eq!(
        run_client(
            &release,
            &mut "<domain/>".as_bytes(),
            &mut out,
            &socket,
            &marker
        ),
        Ok(())
    );
    assert!(marker.exists());
    // Every other operation: nothing printed (libvirt goes on as it was).
    for op in [
        ["start", "begin", "-"],
        ["stopped", "end", "-"],
        ["release", "end", "-"],
    ] {
        let args: Vec<String> = ["qemu", "d"]
            .iter()
            .chain(op.iter())
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            run_client(
                &args,
                &mut "<domain/>".as_bytes(),
                &mut out,
                &socket,
                &marker
            ),
            Ok(())
        );
    }
    assert!(
        run_client(
            &["qemu".to_string()],
            &mut io::empty(),
            &mut out,
            &socket,
            &marker
        )
        .is_ok()
    );
    assert!(out.is_empty());
    let _ = fs::remove_dir_all(&dir);
}
