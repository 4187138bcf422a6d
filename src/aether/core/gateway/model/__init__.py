"""Typed, validated models of the Gateway API objects, parsed from the spec JSON the state keeps."""

from aether.core.gateway.model.fields import SpecInvalid
from aether.core.gateway.model.filters import Filters, HeaderModifier, Mirror, PathModifier, Redirect, Rewrite
from aether.core.gateway.model.gateways import (
    AllowedRoutes,
    Gateway,
    GatewayClass,
    Listener,
    ObjectRejected,
    SecretRef,
    parse_gateway,
    parse_gateway_class,
)
from aether.core.gateway.model.grants import ReferenceGrant, parse_reference_grant
from aether.core.gateway.model.matches import GRPCMatch, HTTPMatch, PathMatch, ValueMatch
from aether.core.gateway.model.refs import BackendRef, ParentRef
from aether.core.gateway.model.routes import ROUTE_KINDS, Retry, Route, RouteRejected, Rule, parse_route

__all__ = [
    "ROUTE_KINDS",
    "AllowedRoutes",
    "BackendRef",
    "Filters",
    "GRPCMatch",
    "Gateway",
    "GatewayClass",
    "HTTPMatch",
    "HeaderModifier",
    "Listener",
    "Mirror",
    "ObjectRejected",
    "ParentRef",
    "PathMatch",
    "PathModifier",
    "Redirect",
    "ReferenceGrant",
    "Retry",
    "Rewrite",
    "Route",
    "RouteRejected",
    "Rule",
    "SecretRef",
    "SpecInvalid",
    "ValueMatch",
    "parse_gateway",
    "parse_gateway_class",
    "parse_reference_grant",
    "parse_route",
]
