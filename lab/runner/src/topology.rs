//! The containerlab topology file, parsed once into what the namespace runner needs:
//! nodes (their `exec` commands, `binds` and the services in their `env`) and links.
//! YAML merge keys (`<<: *anchor`) are applied, as containerlab's parser does, so a fleet
//! of alike nodes is written once; a bind whose target ends in `.tmpl` is a template
//! ([`render`]) that each node fills from its `env`. Pure: no I/O beyond what the caller
//! reads, so the rules are tested here.

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use serde::Deserialize;

/// A containerlab topology file, as far as the lab reads it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// The lab's name.
    pub name: String,
    /// Its nodes and links.
    pub topology: Graph,
}

/// The nodes and the links between them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Graph {
    /// Every node, by name.
    pub nodes: BTreeMap<String, Node>,
    /// The links.
    #[serde(default)]
    pub links: Vec<Link>,
}

/// One node: what containerlab would run, read as a namespace's setup.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    /// containerlab's kind (`linux`).
    pub kind: String,
    /// The container image (unused by the namespace runner).
    pub image: String,
    /// Bind mounts, `source:target`.
    #[serde(default)]
    pub binds: Vec<String>,
    /// Commands run at start-up.
    #[serde(default)]
    pub exec: Vec<String>,
    /// Environment of its services.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Labels; `lab.service.NAME` ones are long-running processes.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// A veth between two nodes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Link {
    /// Its ends, `node:interface`.
    pub endpoints: [String; 2],
}

/// One end of a link: a node's interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The node.
    pub node: String,
    /// The interface.
    pub interface: String,
}

/// A bind mount: a file under the topology's directory seen at `target` in the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bind {
    /// The file, relative to the topology's directory.
    pub source: String,
    /// Where the node sees it.
    pub target: String,
}

/// A long-running process of a node: its label name and command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Service {
    /// The service's name.
    pub name: String,
    /// Its command line.
    pub command: String,
}

impl Topology {
    /// Parses and checks a topology: links name existing nodes and valid interface names,
    /// no interface is used twice, binds are `source:target`, every started service has
    /// a command line.
    pub fn parse(text: &str) -> anyhow::Result<Topology> {
        let mut yaml: serde_yaml::Value =
            serde_yaml::from_str(text).context("not a topology file")?;
        yaml.apply_merge().context("merge keys (<<)")?;
        let topology: Topology = serde_yaml::from_value(yaml).context("not a topology file")?;
        let mut used = Vec::new();
        for (i, link) in topology.topology.links.iter().enumerate() {
            for endpoint in topology
                .endpoints(link)
                .with_context(|| format!("links[{i}]"))?
            {
                if used.contains(&endpoint) {
                    bail!(
                        "links[{i}]: {}:{} is already used by another link",
                        endpoint.node,
                        endpoint.interface
                    );
                }
                used.push(endpoint);
            }
        }
        for (name, node) in &topology.topology.nodes {
            if node.kind != "linux" {
                bail!("nodes.{name}.kind: only `linux` nodes are supported");
            }
            node.binds()
                .with_context(|| format!("nodes.{name}.binds"))?;
            node.services()
                .with_context(|| format!("nodes.{name}.env"))?;
        }
        Ok(topology)
    }

    /// Every node, by name.
    pub fn nodes(&self) -> impl Iterator<Item = (&String, &Node)> {
        self.topology.nodes.iter()
    }

    /// The routers that face PoPs (labelled `lab.role: router`), by name.
    pub fn routers(&self) -> impl Iterator<Item = &String> {
        self.nodes()
            .filter(|(_, node)| node.is_router())
            .map(|(name, _)| name)
    }

    /// The node called `name`.
    pub fn node(&self, name: &str) -> anyhow::Result<&Node> {
        self.topology
            .nodes
            .get(name)
            .with_context(|| format!("no node {name} in the topology"))
    }

    /// Both ends of `link`, parsed.
    pub fn endpoints(&self, link: &Link) -> anyhow::Result<[Endpoint; 2]> {
        let parse = |text: &str| -> anyhow::Result<Endpoint> {
            let (node, interface) = text
                .split_once(':')
                .with_context(|| format!("endpoint {text:?} is not node:interface"))?;
            if !self.topology.nodes.contains_key(node) {
                bail!("endpoint {text:?}: no node {node}");
            }
            if interface.is_empty()
                || interface.len() > MAX_INTERFACE_NAME
                || !interface
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                bail!("endpoint {text:?}: {interface:?} is not a valid interface name");
            }
            Ok(Endpoint {
                node: node.to_owned(),
                interface: interface.to_owned(),
            })
        };
        Ok([parse(&link.endpoints[0])?, parse(&link.endpoints[1])?])
    }
}

impl Node {
    /// Whether it is a router that faces PoPs: labelled `lab.role: router`.
    pub fn is_router(&self) -> bool {
        self.labels
            .get(ROLE_LABEL)
            .is_some_and(|role| role == ROUTER_ROLE)
    }

    /// Its region, in a fleet: its `lab.region` label.
    pub fn region(&self) -> Option<&str> {
        self.labels.get(REGION_LABEL).map(String::as_str)
    }

    /// Whether it runs an edge (a service called `edge`): a PoP.
    pub fn is_pop(&self) -> bool {
        self.services()
            .is_ok_and(|services| services.iter().any(|s| s.name == "edge"))
    }

    /// The node's bind mounts, parsed.
    pub fn binds(&self) -> anyhow::Result<Vec<Bind>> {
        self.binds
            .iter()
            .map(|bind| {
                let mut parts = bind.split(':');
                match (parts.next(), parts.next(), parts.next()) {
                    (Some(source), Some(target), _)
                        if !source.is_empty() && target.starts_with('/') =>
                    {
                        Ok(Bind {
                            source: source.to_owned(),
                            target: target.to_owned(),
                        })
                    }
                    _ => bail!("{bind:?} is not source:/absolute/target[:options]"),
                }
            })
            .collect()
    }

    /// The services in `LAB_START` order, each with its `LAB_SERVICE_<NAME>` command.
    pub fn services(&self) -> anyhow::Result<Vec<Service>> {
        let Some(start) = self.env.get(START_VARIABLE) else {
            return Ok(Vec::new());
        };
        start
            .split_whitespace()
            .map(|name| {
                self.service(name)
                    .with_context(|| format!("{START_VARIABLE} names {name}"))
            })
            .collect()
    }

    /// The service `name` of this node: one `LAB_START` names, or one only defined by
    /// its `LAB_SERVICE_<NAME>`, which `up` leaves stopped and `lab start` runs.
    pub fn service(&self, name: &str) -> anyhow::Result<Service> {
        let variable = service_variable(name);
        let command = self
            .env
            .get(&variable)
            .with_context(|| format!("no service {name}: {variable} is missing"))?;
        Ok(Service {
            name: name.to_owned(),
            command: command.clone(),
        })
    }
}

/// A bind's text with every `${NAME}` replaced by the node's `env` value of NAME; a
/// name the env lacks is an error that names it. Nothing else is touched (a lone `$` or
/// `$NAME` stays): the container entrypoint renders the same templates with `envsubst`.
pub fn render(template: &str, env: &BTreeMap<String, String>) -> anyhow::Result<String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let end = after.find('}').with_context(|| {
            format!(
                "an unclosed ${{ at {:?}",
                &rest[at..rest.len().min(at + 20)]
            )
        })?;
        let name = &after[..end];
        let value = env
            .get(name)
            .with_context(|| format!("${{{name}}} is not in the node's env"))?;
        out.push_str(value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// How container paths map onto the host when nodes are namespaces, not containers:
/// `/etc`, `/var` and `/run` go to the node's own directory, `/usr/local/bin` to the
/// workspace's release binaries.
#[derive(Clone, Debug)]
pub struct PathMap {
    /// The node's own directory (`/etc`, `/var`, `/run` go under it).
    pub node_root: String,
    /// The release binaries (`/usr/local/bin`).
    pub bin_dir: String,
}

impl PathMap {
    /// Rewrites every container path in `text` (a config file or a command line).
    pub fn rewrite(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(at) = rest.find('/') {
            let boundary = at == 0 || !is_path_char(rest[..at].chars().last().unwrap_or(' '));
            let tail = &rest[at..];
            let mapped = boundary.then(|| self.map_prefix(tail)).flatten();
            out.push_str(&rest[..at]);
            match mapped {
                Some((replacement, consumed)) => {
                    out.push_str(&replacement);
                    rest = &tail[consumed..];
                }
                None => {
                    out.push('/');
                    rest = &tail[1..];
                }
            }
        }
        out.push_str(rest);
        out
    }

    /// The host path of one container path.
    pub fn host_path(&self, container_path: &str) -> String {
        self.rewrite(container_path)
    }

    fn map_prefix(&self, tail: &str) -> Option<(String, usize)> {
        if tail.starts_with(BIN_PREFIX) {
            return Some((format!("{}/", self.bin_dir), BIN_PREFIX.len()));
        }
        for prefix in NODE_PREFIXES {
            if tail.starts_with(prefix)
                && tail[prefix.len()..]
                    .chars()
                    .next()
                    .is_none_or(|c| c == '/' || !is_path_char(c))
            {
                return Some((format!("{}{prefix}", self.node_root), prefix.len()));
            }
        }
        None
    }
}

/// `edge-xdp` → `LAB_SERVICE_EDGE_XDP`.
fn service_variable(service: &str) -> String {
    format!(
        "{SERVICE_PREFIX}{}",
        service.to_ascii_uppercase().replace('-', "_")
    )
}

fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '-' | '_')
}

/// The suffix of a bind target that is a template: rendered to the target without it.
pub const TEMPLATE_SUFFIX: &str = ".tmpl";
const START_VARIABLE: &str = "LAB_START";
/// The labels `lab status` reads: a node's role (a router's is `router`) and region.
const ROLE_LABEL: &str = "lab.role";
const ROUTER_ROLE: &str = "router";
const REGION_LABEL: &str = "lab.region";
const SERVICE_PREFIX: &str = "LAB_SERVICE_";
const BIN_PREFIX: &str = "/usr/local/bin/";
const NODE_PREFIXES: [&str; 3] = ["/etc", "/var", "/run"];
/// IFNAMSIZ minus the terminating NUL.
const MAX_INTERFACE_NAME: usize = 15;

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &str = r#"
name: t
topology:
  nodes:
    r:
      kind: linux
      image: r:latest
      binds: ["r/bird.conf:/etc/bird/bird.conf"]
      exec: ["ip addr add 10.0.0.1/30 dev eth1"]
      env:
        LAB_START: bird bgp-agent
        LAB_SERVICE_BIRD: bird -c /etc/bird/bird.conf
        LAB_SERVICE_BGP_AGENT: /usr/local/bin/bgp-agent run
    p:
      kind: linux
      image: p:latest
  links:
    - endpoints: ["r:eth1", "p:eth1"]
"#;

    #[test]
    fn the_shipped_topology_parses() {
        let text = include_str!("../../topology.clab.yml");
        let topology = Topology::parse(text).unwrap();
        for node in [
            "rtr", "pop-a", "pop-b", "origin", "client", "attacker", "mon",
        ] {
            topology.node(node).unwrap();
        }
        let names = |node: &str| -> Vec<String> {
            let services = topology.node(node).unwrap().services().unwrap();
            services.into_iter().map(|s| s.name).collect()
        };
        assert_eq!(
            names("pop-a"),
            ["edge-xdp", "edge", "exabgp", "node-exporter"]
        );
        assert!(names("pop-b").iter().any(|s| s == "bird"));
        assert_eq!(names("origin"), ["nats-1", "nats-2", "nats-3"]);
        assert_eq!(names("mon"), ["prometheus"]);
        assert_eq!(topology.routers().collect::<Vec<_>>(), ["rtr"]);
        assert!(topology.nodes().all(|(_, node)| node.region().is_none()));
    }

    #[test]
    fn the_fleet_parses_with_its_pops_sharing_the_first_of_their_kind() {
        let topology = Topology::parse(include_str!("../../fleet.clab.yml")).unwrap();
        let pops: Vec<&String> = topology
            .nodes()
            .filter(|(_, node)| node.is_pop())
            .map(|(name, _)| name)
            .collect();
        assert_eq!(
            pops,
            [
                "pop-ap1", "pop-ap2", "pop-eu1", "pop-eu2", "pop-eu3", "pop-us1", "pop-us2",
                "pop-us3"
            ]
        );
        for region in ["eu", "us", "ap"] {
            let speakers: Vec<String> = pops
                .iter()
                .filter(|pop| pop.contains(region))
                .map(|pop| {
                    topology.node(pop).unwrap().services().unwrap()[2]
                        .name
                        .clone()
                })
                .collect();
            assert!(
                speakers.contains(&"exabgp".to_owned()) && speakers.contains(&"bird".to_owned()),
                "{region}: {speakers:?}"
            );
            let in_region: Vec<&str> = topology
                .nodes()
                .filter(|(_, node)| node.region() == Some(region))
                .map(|(name, _)| name.as_str())
                .collect();
            assert!(
                in_region.iter().all(|name| name.contains(region)) && in_region.len() >= 3,
                "{region}: {in_region:?}"
            );
        }
        assert_eq!(
            topology.routers().collect::<Vec<_>>(),
            ["rtr-ap", "rtr-eu", "rtr-us"]
        );
        let us3 = topology.node("pop-us3").unwrap();
        assert_eq!(us3.env["POP"], "pop-us3");
        assert_eq!(us3.env["ADDR"], "10.12.3.2");
        assert_eq!(us3.services().unwrap()[3].name, "bgp-agent");
        assert_eq!(topology.node("core2").unwrap().env["NET"], "10.21");
        assert_eq!(
            topology.node("rtr-ap").unwrap().services().unwrap()[0].name,
            "bird"
        );
    }

    #[test]
    fn every_fleet_template_renders_on_every_node_that_binds_it() {
        let topology = Topology::parse(include_str!("../../fleet.clab.yml")).unwrap();
        let templates = [
            (
                "fleet/pop/edge.yaml.tmpl",
                include_str!("../../fleet/pop/edge.yaml.tmpl"),
            ),
            (
                "fleet/pop/agent.yaml.tmpl",
                include_str!("../../fleet/pop/agent.yaml.tmpl"),
            ),
            (
                "fleet/pop/xdp.yaml.tmpl",
                include_str!("../../fleet/pop/xdp.yaml.tmpl"),
            ),
            (
                "fleet/pop/exabgp.conf.tmpl",
                include_str!("../../fleet/pop/exabgp.conf.tmpl"),
            ),
            (
                "fleet/pop/bird.conf.tmpl",
                include_str!("../../fleet/pop/bird.conf.tmpl"),
            ),
            (
                "fleet/core/bird.conf.tmpl",
                include_str!("../../fleet/core/bird.conf.tmpl"),
            ),
        ];
        let mut rendered = 0;
        for (name, node) in topology.nodes() {
            for bind in node.binds().unwrap() {
                if !bind.target.ends_with(TEMPLATE_SUFFIX) {
                    continue;
                }
                let (_, text) = templates
                    .iter()
                    .find(|(source, _)| *source == bind.source)
                    .unwrap_or_else(|| panic!("{name}: {} is not a known template", bind.source));
                let out = render(text, &node.env).unwrap_or_else(|e| panic!("{name}: {e:#}"));
                assert!(!out.contains("${"), "{name}: {}", bind.source);
                rendered += 1;
            }
        }
        assert_eq!(rendered, 8 * 4 + 2);
    }

    #[test]
    fn templates_take_the_node_env_and_name_what_is_missing() {
        let env: BTreeMap<String, String> = [("POP", "pop-eu1"), ("ADDR", "10.11.1.2")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .into();
        assert_eq!(
            render("pop: ${POP}\nlisten: ${ADDR}:9180 # $HOME $ {x}", &env).unwrap(),
            "pop: pop-eu1\nlisten: 10.11.1.2:9180 # $HOME $ {x}"
        );
        let e = format!("{:#}", render("as: ${AS}", &env).unwrap_err());
        assert!(e.contains("${AS}") && e.contains("env"), "{e}");
        let e = format!("{:#}", render("as: ${AS", &env).unwrap_err());
        assert!(e.contains("unclosed"), "{e}");
    }

    #[test]
    fn merge_keys_give_a_node_another_nodes_settings() {
        let text = SMALL.replace(
            "    p:\n      kind: linux\n      image: p:latest",
            "    p:\n      kind: linux\n      image: p:latest\n    q:\n      <<: *r\n      exec: []",
        )
        .replace("    r:\n", "    r: &r\n");
        let topology = Topology::parse(&text).unwrap();
        let q = topology.node("q").unwrap();
        assert_eq!(q.binds, ["r/bird.conf:/etc/bird/bird.conf"]);
        assert!(q.exec.is_empty());
        assert_eq!(q.services().unwrap()[0].name, "bird");
    }

    #[test]
    fn services_come_in_start_order() {
        let topology = Topology::parse(SMALL).unwrap();
        let services = topology.node("r").unwrap().services().unwrap();
        assert_eq!(services[0].name, "bird");
        assert_eq!(services[1].command, "/usr/local/bin/bgp-agent run");
        assert!(topology.node("p").unwrap().services().unwrap().is_empty());
    }

    #[test]
    fn a_service_outside_the_start_list_is_defined_but_not_started() {
        let text = SMALL.replace(
            "        LAB_SERVICE_BIRD:",
            "        LAB_SERVICE_MIRROR: bash /etc/bird/mirror.sh\n        LAB_SERVICE_BIRD:",
        );
        let topology = Topology::parse(&text).unwrap();
        let router = topology.node("r").unwrap();
        assert_eq!(
            router.service("mirror").unwrap().command,
            "bash /etc/bird/mirror.sh"
        );
        assert!(
            router
                .services()
                .unwrap()
                .iter()
                .all(|s| s.name != "mirror")
        );
        let e = format!("{:#}", router.service("nats").unwrap_err());
        assert!(e.contains("LAB_SERVICE_NATS"), "{e}");
    }

    #[test]
    fn bad_topologies_say_where() {
        let error = |text: &str| format!("{:#}", Topology::parse(text).unwrap_err());
        let e = error(&SMALL.replace("\"p:eth1\"", "\"q:eth1\""));
        assert!(e.contains("links[0]") && e.contains("no node q"), "{e}");
        let e = error(&SMALL.replace("\"p:eth1\"", "\"r:eth1\""));
        assert!(e.contains("already used"), "{e}");
        let e = error(&SMALL.replace("\"p:eth1\"", "\"p:an-interface-name-too-long\""));
        assert!(e.contains("not a valid interface name"), "{e}");
        let e = error(&SMALL.replace("LAB_START: bird bgp-agent", "LAB_START: bird nats"));
        assert!(
            e.contains("nodes.r.env") && e.contains("LAB_SERVICE_NATS"),
            "{e}"
        );
        let e = error(&SMALL.replace(":/etc/bird/bird.conf", ":etc/bird.conf"));
        assert!(e.contains("nodes.r.binds"), "{e}");
        let e = error(&SMALL.replace("kind: linux\n      image: p", "kind: srl\n      image: p"));
        assert!(e.contains("nodes.p.kind"), "{e}");
    }

    #[test]
    fn container_paths_map_to_the_node_directory() {
        let map = PathMap {
            node_root: "/run/lab/pop-a/root".into(),
            bin_dir: "/src/target/release".into(),
        };
        assert_eq!(
            map.rewrite("/usr/local/bin/edge run --config /etc/edge/edge.yaml"),
            "/src/target/release/edge run --config /run/lab/pop-a/root/etc/edge/edge.yaml"
        );
        assert_eq!(
            map.rewrite("dir: /var/lib/edge/spool\nsocket: /run/bird.ctl"),
            "dir: /run/lab/pop-a/root/var/lib/edge/spool\nsocket: /run/lab/pop-a/root/run/bird.ctl"
        );
        assert_eq!(
            map.rewrite("include \"/etc/bird/anycast.conf\";"),
            "include \"/run/lab/pop-a/root/etc/bird/anycast.conf\";"
        );
        // Not container paths: other roots, URLs, prefixes inside words, CIDRs.
        for unchanged in [
            "/usr/bin/bird",
            "http://127.0.0.1:9180/readyz",
            "/etcetera",
            "192.0.2.10/32",
            "a/etc/b",
        ] {
            assert_eq!(map.rewrite(unchanged), unchanged);
        }
    }
}
