"""The search family: the option sets that make a step fastest, whole (`search`) or per fusion."""

from nvscope._tools._search._fusions import FusionSearchResult as FusionSearchResult
from nvscope._tools._search._fusions import search_fusions as search_fusions
from nvscope._tools._search._report import SearchResult as SearchResult
from nvscope._tools._search._search import search as search
