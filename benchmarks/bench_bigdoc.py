"""One large document, then the next search: CLI wall time and peak RSS. Prints numbers only.

    .venv/bin/python benchmarks/bench_bigdoc.py [--kinds cjk zh ja en] [--bytes 1040000]

For each kind a fresh store of ``--small`` ordinary English notes (its index built by one
search) gets one ``remember`` of a text just under the CLI's 1 MiB request limit, and then one
``search`` for a phrase from the middle of that text; both are separate ``zkr`` processes run
under ``/usr/bin/time -v`` (wall time, maximum resident set size), so the search pays the
index's drain of the large document, as the first search after such a write does. A second
search for a phrase from the end shows whether the document is found (its rank in the pack).

Kinds: ``cjk`` random CJK ideographs (U+4E00-U+9FFF: almost every bigram new, the worst case),
``zh`` shuffled natural Chinese sentences, ``zhw`` Chinese words drawn at random from a list of
about 200 (more distinct bigrams than ``zh``), ``ja`` shuffled Japanese sentences, ``en``
English: the turns of the LoCoMo sample (``--locomo``, if present) or shuffled built-in
sentences. The baseline line is a search of the store without the large document.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from zkr import MemoryDb
from zkr.model import RememberRequest, SearchRequest, SourceKind

T, P = "bench", "me"
ZH = """
今天早上我和同事一起去公司附近的咖啡店吃早饭。
这个项目的数据库需要在下个月之前完成迁移工作。
我们讨论了明年春天去杭州旅行的计划，大家都很期待。
她说周末要带孩子去博物馆看恐龙化石展览。
会议结束以后，经理让我整理一份详细的报告。
图书馆新到了一批关于人工智能和机器学习的书籍。
昨天晚上下了很大的雨，路上的交通非常拥堵。
为了保持健康，他每天坚持跑步半个小时。
这家餐厅的红烧肉和清蒸鱼做得特别好吃。
我们需要重新设计用户界面，让操作更加简单直观。
奶奶的生日快到了，全家人准备一起给她庆祝。
服务器在凌晨三点突然宕机，运维人员紧急处理了故障。
老师提醒学生们下周一之前交上论文的初稿。
他最近在学习弹钢琴，每天晚上练习一个小时。
这座城市的地铁线路越来越多，出行方便了不少。
医生建议我少吃甜食，多喝水，注意休息。
我们公司明年计划在上海开设一个新的研发中心。
周五下午团队组织了一次爬山活动，风景非常美丽。
这本小说讲述了一个普通家庭三代人的故事。
妹妹刚刚考上了北京的一所大学，学习计算机专业。
由于预算有限，我们只能先完成最重要的几个功能。
他把护照忘在了酒店的房间里，只好回去取。
春节期间火车票非常紧张，需要提前一个月预订。
新来的实习生工作很认真，很快就熟悉了业务流程。
我们在海边租了一间小房子，准备住一个星期。
这次考试的题目比上次难多了，很多同学没有做完。
爸爸退休以后开始种菜，院子里种满了西红柿和黄瓜。
客户要求我们在合同里增加一条关于数据安全的条款。
朋友推荐我看一部关于宇宙探索的纪录片。
下个季度的销售目标比今年提高了百分之二十。
"""
ZH_WORDS = """
我们 你们 他们 今天 明天 昨天 早上 晚上 周末 公司 学校 医院 银行 超市 餐厅 咖啡 火车 飞机 地铁
汽车 城市 乡村 朋友 同事 老师 学生 医生 经理 客户 孩子 父母 妹妹 哥哥 奶奶 爷爷 项目 会议 报告
计划 预算 合同 数据 系统 服务器 数据库 软件 程序 网络 手机 电脑 键盘 屏幕 文件 邮件 问题 方案
结果 原因 时间 地点 天气 下雨 阳光 春天 夏天 秋天 冬天 旅行 护照 酒店 房间 行李 机场 车站 博物馆
图书馆 公园 海边 山上 河边 森林 动物 植物 花园 西红柿 黄瓜 米饭 面条 饺子 鸡蛋 牛奶 水果 苹果
香蕉 西瓜 茶叶 音乐 电影 小说 新闻 历史 科学 数学 物理 化学 语言 文化 艺术 钢琴 吉他 跑步 游泳
爬山 足球 篮球 健康 身体 休息 工作 学习 研究 讨论 决定 准备 完成 开始 结束 继续 需要 希望 喜欢
知道 认为 觉得 发现 记得 忘记 提醒 建议 要求 同意 拒绝 帮助 介绍 解释 检查 修改 设计 开发 测试
部署 迁移 备份 安全 隐私 重要 简单 复杂 方便 困难 快乐 紧张 安静 热闹 便宜 昂贵 新鲜 干净 漂亮
认真 仔细 突然 已经 马上 终于 经常 偶尔 一起 特别 非常 比较 可能 应该 必须 或者 但是 因为 所以
如果 虽然 然后 而且 杭州 上海 北京 广州 深圳 成都 西安 南京 武汉 重庆
"""
JA = """
今日は朝から雨が降っていたので、傘を持って会社に行きました。
来週の会議までに新しい企画書を完成させなければなりません。
週末は家族と一緒に京都の古いお寺を見に行く予定です。
駅の近くに新しいラーメン屋ができたので、友達と食べに行きました。
データベースの移行作業は予定より少し遅れています。
妹は来年の春から東京の大学で経済学を勉強します。
最近、毎朝三十分ほど公園を散歩するようにしています。
図書館で借りた本を返すのをすっかり忘れていました。
サーバーが夜中に止まってしまい、担当者が急いで対応しました。
お客様から納期を一週間早めてほしいという連絡がありました。
祖母の誕生日には、みんなで手作りのケーキを用意しました。
新幹線の切符は早めに予約しておいたほうがいいですよ。
この映画は子供から大人まで楽しめる素晴らしい作品です。
先生は宿題を金曜日までに提出するように言いました。
北海道の冬はとても寒いですが、雪景色が本当にきれいです。
健康のために野菜を多く食べて、甘いものを控えています。
新しいアプリの画面デザインについてチームで話し合いました。
パスポートをホテルの部屋に置き忘れてしまいました。
夏休みには海の近くの小さな町でのんびり過ごしたいです。
父は定年退職してから庭で野菜を育て始めました。
"""
EN = """
We met at the coffee shop near the office before the planning meeting on Tuesday.
The database migration has to be finished before the end of next month.
My sister just started a new job as a nurse at the children's hospital downtown.
The weather was terrible, so we postponed the hiking trip to the mountains.
I finally finished reading that long novel about three generations of a fishing family.
The client asked us to add a clause about data protection to the contract.
He has been practising the piano every evening for almost an hour.
Our team is planning a small celebration for grandmother's ninetieth birthday.
The server went down at three in the morning and the on-call engineer restored it.
She recommended a documentary about deep space exploration and the early astronauts.
"""


def _sentences(block: str) -> list[str]:
    return [line.strip() for line in block.strip().splitlines() if line.strip()]


def _locomo_turns(folder: Path) -> list[str]:
    turns: list[str] = []
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text())
        for key, value in data.items():
            if re.fullmatch(r"session_\d+", key) and isinstance(value, list):
                turns.extend(f"{t['speaker']}: {t['text']}" for t in value)
    return turns


def text_of(kind: str, limit: int, rng: random.Random, locomo: Path) -> str:
    """A text of ``kind`` whose JSON request stays under ``limit`` bytes (UTF-8)."""
    parts: list[str] = []
    size = 0
    budget = limit - 400  # the request's other fields
    if kind == "cjk":
        count = budget // 3
        return "".join(chr(rng.randrange(0x4E00, 0xA000)) for _ in range(count))
    pool: list[str]
    sep = ""
    if kind == "zh":
        pool = _sentences(ZH)
    elif kind == "ja":
        pool = _sentences(JA)
    elif kind == "zhw":
        words = ZH_WORDS.split()
        pool = [
            "".join(rng.choice(words) for _ in range(rng.randint(4, 12))) + "。"
            for _ in range(5000)
        ]
    else:
        pool = _locomo_turns(locomo) or _sentences(EN)
        sep = " "
    while True:
        piece = rng.choice(pool)
        cost = len(piece.encode()) + len(sep) + (piece.count('"') + piece.count("\\"))
        if size + cost > budget:
            return sep.join(parts)
        parts.append(piece)
        size += cost


def run(
    zkr: str, db: Path, command: str, request: dict[str, object]
) -> tuple[float, float, int, str]:
    """Wall and CPU (user + system) seconds, peak RSS in MB and stdout of one ``zkr`` call
    under ``/usr/bin/time -v``."""
    data = json.dumps(request, ensure_ascii=False).encode()
    proc = subprocess.run(
        ["/usr/bin/time", "-v", zkr, "--db", str(db), command],
        input=data,
        capture_output=True,
        check=False,
    )
    err = proc.stderr.decode(errors="replace")
    if proc.returncode != 0:
        raise SystemExit(f"{command} failed ({len(data)} bytes): {err[-2000:]}")
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", err)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", err)
    cpu = sum(float(x) for x in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", err))
    assert wall and rss
    seconds = int(wall.group(1) or 0) * 3600 + int(wall.group(2)) * 60 + float(wall.group(3))
    return seconds, cpu, int(rss.group(1)) // 1024, proc.stdout.decode()


def build_store(path: Path, small: int, rng: random.Random) -> None:
    pool = _sentences(EN)
    with MemoryDb.open(path) as db:
        for i in range(small):
            text = " ".join(rng.choice(pool) for _ in range(rng.randint(1, 3)))
            db.remember(
                RememberRequest(
                    tenant_id=T,
                    person_id=P,
                    kind=SourceKind.CONVERSATION,
                    text=text,
                    captured_at=1_700_000_000 + i,
                    recorded_at=1_700_000_000 + i,
                )
            )
        db.search(SearchRequest(tenant_id=T, person_id=P, query="database migration"))


def phrase(text: str, at: float, kind: str) -> str:
    """Sixteen characters (CJK) or eight words (English) of ``text`` at ``at`` (0.5: the middle,
    1: the end)."""
    if kind == "en":
        words = text.split()
        i = int(len(words) * at)
        return " ".join(words[max(0, i - 8) : i] if at >= 1 else words[i : i + 8])
    i = int(len(text) * at)
    return text[max(0, i - 16) : i] if at >= 1 else text[i : i + 16]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kinds", nargs="+", default=["cjk", "zh", "zhw", "ja", "en"])
    parser.add_argument("--bytes", type=int, default=1_048_000, help="request size bound")
    parser.add_argument("--small", type=int, default=300, help="ordinary notes before it")
    parser.add_argument("--locomo", type=Path, default=Path("../shared/data/locomo"))
    parser.add_argument("--zkr", default=str(Path(sys.executable).with_name("zkr")))
    args = parser.parse_args()
    rng = random.Random(7)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average {load}; {args.small} small notes, then one remember of ≤ {args.bytes} B")
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base.db"
        build_store(base, args.small, rng)
        shutil.copy(base, Path(tmp) / "b.db")
        wall, cpu, rss, _ = run(args.zkr, Path(tmp) / "b.db", "search", _search("coffee meeting"))
        print(f"{'baseline':9} {'':8} {'':22} {wall:5.2f} s {cpu:5.2f} s {rss:4d} MB")
        print(f"{'':18} {'remember: wall, cpu, RSS':>24} {'1st search: wall, cpu, RSS':>26}  rank")
        for kind in args.kinds:
            db = Path(tmp) / f"{kind}.db"
            shutil.copy(base, db)
            text = text_of(kind, args.bytes, rng, args.locomo)
            request = {
                "tenant_id": T,
                "person_id": P,
                "kind": "document",
                "text": text,
                "captured_at": 1_800_000_000,
                "recorded_at": 1_800_000_000,
            }
            w1, c1, r1, out = run(args.zkr, db, "remember", request)
            source = json.loads(out)["source_id"]
            w2, c2, r2, out = run(args.zkr, db, "search", _search(phrase(text, 0.5, kind)))
            mid = _rank(out, source)
            out = run(args.zkr, db, "search", _search(phrase(text, 1.0, kind)))[3]
            end = _rank(out, source)
            print(
                f"{kind:4} {len(text):7d} ch {w1:5.2f} s {c1:5.2f} s {r1:4d} MB"
                f" {w2:5.2f} s {c2:5.2f} s {r2:4d} MB  mid #{mid} end #{end}"
            )


def _search(query: str) -> dict[str, object]:
    return {"tenant_id": T, "person_id": P, "query": query, "limit": 10}


def _rank(out: str, source: str) -> str:
    items = json.loads(out)["items"]
    for i, item in enumerate(items, 1):
        if source in json.dumps(item):
            return str(i)
    return "-"


if __name__ == "__main__":
    main()
