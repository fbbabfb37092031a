"""Single-valued query parameters are given once, or the request is refused before
authorization and the handler read them (the repeated-parameter bypass of issue 9)."""

from __future__ import annotations

import httpx
import pytest
from fastapi import APIRouter

from apiserver.api.query import SINGLE_VALUED, check_single_values
from apiserver.errors import BadRequest
from apiserver.serving.app import create_app
from apiserver.serving.health import Readiness
from tests.support.access import AllowAll

LIST = "/apis/notifier.x-k8s.io/v1alpha1/namespaces/ns/podnotifiers"


@pytest.mark.parametrize("name", sorted(SINGLE_VALUED))
def test_every_single_valued_parameter_given_twice_is_refused(name: str) -> None:
    with pytest.raises(BadRequest) as raised:
        check_single_values(f"{name}=a&other=1&{name}=")
    assert f'"{name}" is given 2 times' in raised.value.message


@pytest.mark.parametrize("query", [
    "", "watch=true", "labelSelector=a%3Db&fieldSelector=", "dryRun=All&dryRun=All",
    "unknown=1&unknown=2", "limit=5&continue=abc",
])
def test_single_values_and_lists_pass(query: str) -> None:
    check_single_values(query)


def test_percent_encoded_names_are_the_same_parameter() -> None:
    with pytest.raises(BadRequest):
        check_single_values("watch=false&%77atch=true")


@pytest.mark.parametrize("query", [
    "watch=false&watch=true",
    "fieldSelector=metadata.name%3Donly-this&fieldSelector=",
])
async def test_repeated_parameters_never_reach_authorization_or_handler(query: str) -> None:
    recorder, reached = AllowAll(), []
    router = APIRouter()

    @router.get(LIST)
    async def listed() -> dict[str, str]:
        reached.append(True)
        return {}

    app = create_app(authenticator=recorder, authorizer=recorder,  # type: ignore[arg-type]
                     readiness=Readiness(), resource_router=router)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="https://notifier.test") as client:
        response = await client.get(f"{LIST}?{query}")
        assert response.status_code == 400
        assert response.json()["reason"] == "BadRequest"
        assert (await client.get(f"{LIST}?watch=false")).status_code == 200
    assert len(recorder.asked) == 1 and reached == [True]
