"""The learner-facing words of grading outputs (Simplified Chinese), in one place so gettext can wrap them.

The kit's gettext module is being added separately; until it lands, these constants are the catalog.
"""

from __future__ import annotations

#: A lab's status as the grader writes it -> what a learner reads.
LAB_STATUS = {
    "done": "已完成",
    "failing": "有测试未通过",
    "not started": "未开始",
}

#: A learner record's status -> what a learner reads.
RECORD_STATUS = {
    "complete": "全部完成",
    "partial": "部分完成",
    "not started": "未开始",
    "error": "无法运行（代码导入失败或提交有问题）",
    "timeout": "超时（可能有死循环）",
    "crashed": "测试进程意外退出",
    "skipped": "未评分（不是可评分的提交）",
    "sandbox-error": "评分环境出错（与你的代码无关，请联系老师）",
}

CREDIT_RULE = {"fraction": "按通过测试的比例给分", "all-or-nothing": "全部通过才得分"}

FEEDBACK_TITLE = "评分反馈"
LEARNER = "学习者"
CHECKPOINT = "检查点"
TOTAL = "总分"
EXTRA = "附加分"
STATUS = "状态"
POINTS = "得分"
TESTS = "测试"
OPTIONAL = "附加分"
FIRST_FAILING = "第一个未通过的测试"
QUESTION = "它在问"
HINT = "提示"
MESSAGE = "说明"
EDITED_TESTS = "你修改过 tests/ 下的文件；评分始终使用课程自带的原始测试，你的修改不影响结果。"
ALL_DONE = "所有必做实验都已完成。"
NO_DOCSTRING = "（这个测试没有说明）"


def lab_status(status: str) -> str:
    """A lab status in the course language; "blocked by X" names the lab it waits for."""
    if status.startswith("blocked by "):
        return f"被 Lab {status.removeprefix('blocked by ')} 阻塞（先完成它）"
    return LAB_STATUS.get(status, status)


def record_status(status: str) -> str:
    """A learner record's status in the course language."""
    return RECORD_STATUS.get(status, status)
