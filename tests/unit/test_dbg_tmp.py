from tests.unit.test_handlers_podnotifiers import *  # noqa

async def test_dbg(served, store):
    await store.create(record("a"))
    async with served.stream("GET", f"{NS}?watch=true") as response:
        lines = response.aiter_lines()
        print(await read_event(lines))
        w = store.watches[0]
        print("closed?", w._closed, w._initial, w._queued)
        await asyncio.sleep(0.2)
        print("closed?", w._closed)
