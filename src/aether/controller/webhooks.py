"""`aether controller`'s webhooks: the serving certificate chosen (files, or the replicas' shared generated pair with
the caBundle written), the init container's image found, and the HTTPS server run.

Every replica serves, leader or not. A replica that cannot get its certificate or image logs why, naming the fix,
and goes on without webhooks: the election and the status writes do not depend on them, and the webhook
configurations' failurePolicy decides what the API server does meanwhile (README, "Admission webhooks").
"""

from __future__ import annotations

import datetime
import functools
import logging
from collections.abc import Callable
from pathlib import Path

import attrs
import trio

from aether.controller.instrumentation import observe_webhooks
from aether.controller.pod_mutation import IdentityCheck, PodMutation
from aether.controller.route_admission import GatewayOwner, every_gateway
from aether.controller.webhook_server import DEFAULT_WEBHOOK_PORT, WebhookServer, no_mesh_config
from aether.controller.webhook_tls import (
    ServingCertificate,
    TlsFilesInvalid,
    ensure_ca_bundles,
    load_serving_certificate,
    shared_serving_certificate,
)
from aether.core.events import MeshConfig
from aether.kube.api import KubeClient
from aether.kube.errors import KubeError
from aether.kube.resources import PODS
from aether.telemetry import current_telemetry

__all__ = ["WebhookOptions", "serve_webhooks"]

LOG = logging.getLogger("aether.controller.webhooks")


@attrs.frozen(kw_only=True)
class WebhookOptions:
    """How a replica serves the webhooks."""

    host: str = "0.0.0.0"  # the pod's port, reached through the Service
    port: int = DEFAULT_WEBHOOK_PORT
    cert_file: Path | None = None
    """With `key_file`: a mounted pair (its CA is the installer's to put in the caBundle)."""
    key_file: Path | None = None
    image: str | None = None
    """The `aether-identity-ready` image; None reads this replica's own pod's image."""
    pod_namespace: str = "aether-system"
    pod_name: str = ""
    container: str = "controller"
    """The container of the own pod whose image the init container runs."""
    mesh_domain: str | None = None
    """The mesh domain mutated pods get DNS `ndots` for; None follows the `mesh_config` source given to
    `serve_webhooks` (the MeshConfig projected into aether-system), else the core's default."""
    trust_domain: str | None = None
    """The trust domain the injected inbound check expects; None follows the `mesh_config` source, as above."""
    identity_check: IdentityCheck = IdentityCheck.INBOUND
    """How the injected init container checks the pod's SVID (`aether.controller.pod_mutation`)."""


async def own_image(client: KubeClient, options: WebhookOptions) -> str:
    """The image of this replica's `container` (its own pod, read from the API).

    Raises:
        KubeError: The pod cannot be read.
        LookupError: The pod has no such container.
    """
    pod = await client.get(PODS, name=options.pod_name, namespace=options.pod_namespace)
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == options.container and container.get("image"):
            return str(container["image"])
    raise LookupError(
        f"pod {options.pod_namespace}/{options.pod_name}: no container {options.container!r} with an image"
    )


CA_BUNDLE_RESYNC = 60.0
"""Seconds between checks of our webhook configurations' caBundle in generated mode: a configuration applied (or
replaced) after the replica started gets it within this."""


def _mounted(options: WebhookOptions) -> bool:
    return options.cert_file is not None and options.key_file is not None


async def _certificate(client: KubeClient, options: WebhookOptions) -> ServingCertificate:
    if options.cert_file is not None and options.key_file is not None:
        return await trio.to_thread.run_sync(load_serving_certificate, options.cert_file, options.key_file)
    return await shared_serving_certificate(client, now=datetime.datetime.now(datetime.UTC))


async def _write_ca_bundles(client: KubeClient, ca_pem: bytes) -> None:
    try:
        await ensure_ca_bundles(client, ca_pem)
    except KubeError as error:
        LOG.warning("webhook caBundle not written (tried again in %g s): %s", CA_BUNDLE_RESYNC, error)


async def _keep_ca_bundles(client: KubeClient, ca_pem: bytes) -> None:
    """Write the caBundle every `CA_BUNDLE_RESYNC` where it differs; a failure is logged and retried."""
    while True:
        await trio.sleep(CA_BUNDLE_RESYNC)
        await _write_ca_bundles(client, ca_pem)


async def serve_webhooks(
    client: KubeClient,
    options: WebhookOptions,
    *,
    owns_gateway: GatewayOwner = every_gateway,
    mesh_config: Callable[[], MeshConfig | None] = no_mesh_config,
    task_status: trio.TaskStatus[WebhookServer | None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the webhooks until cancelled; `task_status` gets the server (its port in `.port`), or None when this
    replica cannot serve (the error is logged). `owns_gateway` (the replica's view: `RunningController.owns_gateway`)
    keeps the route webhook to routes of our Gateways and Services; `mesh_config` (`MeshConfigProjection.
    mesh_config`) gives the mesh's trust and mesh domains at each review, except where `options` fixes one."""
    try:
        pair = await _certificate(client, options)
        image = options.image or await own_image(client, options)
        context = await trio.to_thread.run_sync(pair.server_context)
    except (KubeError, TlsFilesInvalid, LookupError) as error:
        LOG.error(
            "admission webhooks not served: %s (give --webhook-cert/--webhook-key, or let the controller write "
            "its Secret; --init-image names the init container's image)",
            error,
        )
        task_status.started(None)
        return
    defaults = MeshConfig()

    def with_flags(config: MeshConfig) -> MeshConfig:  # a domain the flags give wins over the MeshConfig's
        return attrs.evolve(
            config,
            trust_domain=options.trust_domain or config.trust_domain,
            mesh_domain=options.mesh_domain or config.mesh_domain,
        )

    def in_force() -> MeshConfig | None:
        config = mesh_config()
        return None if config is None else with_flags(config)

    fixed = with_flags(defaults)
    mutation = PodMutation(
        image=image,
        identity_check=options.identity_check,
        trust_domain=fixed.trust_domain,
        mesh_domain=fixed.mesh_domain,
    )
    server = WebhookServer(
        ssl_context=context,
        mutation=mutation,
        mesh_config=in_force,
        owns_gateway=owns_gateway,
    )
    observe_webhooks(current_telemetry(), server.statistics)
    async with trio.open_nursery() as nursery:
        await nursery.start(functools.partial(server.serve, host=options.host, port=options.port))
        if not _mounted(options):
            # Serving already: a caBundle written from here on is answered by this replica.
            await _write_ca_bundles(client, pair.ca_pem)
            nursery.start_soon(_keep_ca_bundles, client, pair.ca_pem)
        LOG.info("admission webhooks served on %s:%d", options.host, server.port)
        task_status.started(server)
