"""Identity sources: where a node's X.509-SVIDs and trust bundle come from (a directory of PEM files)."""

from aether.identity.errors import IdentityError, SvidDirectoryError, TrustDomainError
from aether.identity.files import (
    BUNDLE_FILE,
    POLL_INTERVAL,
    SVID_SUFFIX,
    SvidFileSource,
    SvidFilesStatistics,
    owner_of_file,
    serve_svid_files,
    spiffe_id_of,
    svid_file_name,
)
from aether.identity.pem import PemBlock, bundle_from_pem, bundle_trust_domains, pem_blocks, svid_from_pem

__all__ = [
    "BUNDLE_FILE",
    "POLL_INTERVAL",
    "SVID_SUFFIX",
    "IdentityError",
    "PemBlock",
    "SvidDirectoryError",
    "SvidFileSource",
    "SvidFilesStatistics",
    "TrustDomainError",
    "bundle_from_pem",
    "bundle_trust_domains",
    "owner_of_file",
    "pem_blocks",
    "serve_svid_files",
    "spiffe_id_of",
    "svid_file_name",
    "svid_from_pem",
]
